// Graceful stop: while a StopSignal lives, SIGINT and SIGTERM only set a flag, which the
// training loop reads after each step to save a checkpoint and exit cleanly. A second signal
// of the same kind terminates at once, as without the handler.
#pragma once

namespace gemmax {

class StopSignal {
 public:
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  int received() const;  // the signal number, or 0
  static const char* name(int signal);
};

}  // namespace gemmax
