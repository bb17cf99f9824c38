// Progress of a long operation (tokenizing a corpus, reading or writing a checkpoint) on
// stderr: on a terminal, one line redrawn in place; otherwise (a log file, a pipe) a plain line
// every GEMMAX_PROGRESS_SECONDS (default 10). Operations that end before the first line is due
// print nothing.
//
//   Progress p("tokenize", total_bytes, "bytes");
//   for (...) p.add(n);
//   p.finish();  // the closing line; an operation that fails (the destructor without finish)
//                // only ends the terminal line, so that the error starts on a fresh one
#pragma once

#include <functional>
#include <iosfwd>
#include <string>

namespace gemmax {

struct ProgressOutput {
  std::ostream* out = nullptr;    // std::cerr when null
  bool terminal = false;          // redraw one line with '\r'
  double first_after = 10;        // seconds before the first line
  double period = 10;             // seconds between lines
  std::function<double()> clock;  // seconds on any fixed origin; a steady clock when empty

  // stderr: on a terminal, a line redrawn 4 times a second after the first second; else plain
  // lines every GEMMAX_PROGRESS_SECONDS (0: at every update). Throws for a bad value.
  static ProgressOutput standard();
};

class Progress {
 public:
  // `what` names the operation; `total` is the amount of work (0: unknown); `unit` is "bytes"
  // (shown in KiB, MiB, GiB) or a plural noun ("tokens", "tensors").
  Progress(std::string what, double total, std::string unit,
           ProgressOutput output = ProgressOutput::standard());
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void add(double n) { set(done_ + n); }
  void set(double done);
  // The closing line ("tokenize: 4.00 GiB in 47 s (87.1 MiB/s)"), if a line was shown.
  void finish();

  // "tokenize: 1.20 GiB / 4.00 GiB (30%) | 85.3 MiB/s | 34 s left" at time `now`.
  std::string status(double now) const;

 private:
  void show(const std::string& line, bool end);
  std::string amount(double n) const;

  std::string what_, unit_;
  double total_ = 0, done_ = 0;
  ProgressOutput out_;
  double start_ = 0, next_ = 0;
  size_t drawn_ = 0;  // length of the terminal line drawn last
  bool shown_ = false, finished_ = false;
};

// "0.4 s", "12 s", "3 min 05 s", "2 h 10 min".
std::string format_duration(double seconds);

}  // namespace gemmax
