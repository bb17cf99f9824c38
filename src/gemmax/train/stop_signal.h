// Graceful stop. While a StopSignal lives, SIGINT and SIGTERM ask the run to stop: the training
// loop reads the request after each step, saves a checkpoint and exits 0.
//
// Launchers and schedulers often deliver one request several times: GNU `timeout`, for one,
// signals its child and then the child's whole process group, and some send SIGTERM and later
// SIGINT. Every signal sent with kill() is therefore the same request, however many arrive.
// Only a person at a terminal pressing Ctrl-C a second time (a SIGINT from the terminal driver,
// si_code SI_KERNEL) forces an immediate exit: the process dies by SIGINT, and a checkpoint
// being written at that moment is abandoned (its temporary folder removed), so the previous
// checkpoint stays the latest. Signals the process was started with ignored (`nohup`, `&` in
// scripts) stay ignored. The previous handlers are restored when the StopSignal ends, unless a
// stop was requested: the process is then on its way out, and the handlers stay, so that a
// launcher's repeats arriving after the run ended (timeout's second SIGTERM, say) do not kill it
// as it exits.
//
// Before and after the training loop (install_at_startup, the first thing `gemmax train` does):
// a stop request before training starts ends the process at once with status 0 and a line
// saying nothing was started; one that arrives while weights load (a Loading scope) is kept,
// and the run ends right after the load, before writing anything (loaded_then_stopped); one
// that arrives after the loop ended lets the run finish exiting.
#pragma once

namespace gemmax {

class StopSignal {
 public:
  // Installs the handlers for the whole process (idempotent); a StopSignal takes them over.
  // Async-signal-safe and dependent on no static constructor: the gemmax binary calls it from
  // its .preinit_array, before anything else of the process is initialised.
  static void install_at_startup();
  // Puts back the handlers install_at_startup found (for the commands that do not train).
  static void restore_startup_handlers();

  // Marks loading before training starts: a stop request waits for the load to end.
  class Loading {
   public:
    Loading();
    ~Loading();
    Loading(const Loading&) = delete;
    Loading& operator=(const Loading&) = delete;
  };
  // The signal that arrived while loading (and no StopSignal lived), or 0.
  static int requested_before_start();

  StopSignal();  // at most one lives at a time
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  int received() const;  // the first stop signal's number, or 0
  bool forced() const;   // Ctrl-C was pressed twice at a terminal

  // Marks a checkpoint save: a forced stop during it interrupts the save's writes (which then
  // fail and remove what they wrote) instead of killing the process at once.
  class Saving {
   public:
    Saving();
    ~Saving();
    Saving(const Saving&) = delete;
    Saving& operator=(const Saving&) = delete;
  };

  // Ends the process as the forced stop would have: by SIGINT with its default action.
  [[noreturn]] static void die_by_forced_stop();

  static const char* name(int signal);
};

}  // namespace gemmax
