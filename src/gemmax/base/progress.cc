#include "gemmax/base/progress.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "gemmax/base/error.h"
#include "gemmax/base/strings.h"

namespace gemmax {

ProgressOutput ProgressOutput::standard() {
  ProgressOutput o;
  const char* term = std::getenv("TERM");
  o.terminal = ::isatty(STDERR_FILENO) && !(term && std::strcmp(term, "dumb") == 0);
  if (o.terminal) {
    o.first_after = 1;
    o.period = 0.25;
  } else if (const char* env = std::getenv("GEMMAX_PROGRESS_SECONDS"); env && *env) {
    char* end = nullptr;
    const double s = std::strtod(env, &end);
    if (*end != 0 || !(s >= 0))
      fail("GEMMAX_PROGRESS_SECONDS='", env,
           "' is not a number of seconds >= 0 (the period of "
           "progress lines when stderr is not a terminal; unset it for the default, 10)");
    o.first_after = o.period = s;
  }
  return o;
}

Progress::Progress(std::string what, double total, std::string unit, ProgressOutput output)
    : what_(std::move(what)), unit_(std::move(unit)), total_(total), out_(std::move(output)) {
  if (!out_.out) out_.out = &std::cerr;
  if (!out_.clock)
    out_.clock = [] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
  start_ = out_.clock();
  next_ = start_ + out_.first_after;
}

Progress::~Progress() {
  // Without finish() the operation failed: end the terminal line, claim nothing.
  if (!finished_ && shown_ && out_.terminal) *out_.out << "\n" << std::flush;
}

void Progress::set(double done) {
  done_ = done;
  if (finished_) return;
  const double now = out_.clock();
  if (now < next_) return;
  show(status(now), false);
  next_ = now + out_.period;
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (!shown_) return;
  const double elapsed = out_.clock() - start_;
  std::string line = what_ + ": " + amount(done_) + " in " + format_duration(elapsed);
  if (elapsed > 0) line += " (" + amount(done_ / elapsed) + "/s)";
  show(line, true);
}

std::string Progress::amount(double n) const {
  return unit_ == "bytes" ? format_bytes(n) : format_count(n) + " " + unit_;
}

std::string Progress::status(double now) const {
  std::string s = what_ + ": ";
  if (total_ > 0) {
    s += unit_ == "bytes" ? format_bytes(done_) + " / " + format_bytes(total_)
                          : format_count(done_) + " / " + amount(total_);
    s += " (" + std::to_string(int(std::floor(100 * std::min(1.0, done_ / total_)))) + "%)";
  } else {
    s += amount(done_);
  }
  const double elapsed = now - start_;
  if (elapsed <= 0 || done_ <= 0) return s;
  const double rate = done_ / elapsed;
  s += " | " + amount(rate) + "/s";
  if (total_ > done_) s += " | " + format_duration((total_ - done_) / rate) + " left";
  return s;
}

void Progress::show(const std::string& text, bool end) {
  const std::string line = "gemmax: " + text;
  std::ostream& os = *out_.out;
  if (out_.terminal) {
    os << '\r' << line;
    if (line.size() < drawn_) os << std::string(drawn_ - line.size(), ' ');
    drawn_ = line.size();
    if (end) os << '\n';
  } else {
    os << line << '\n';
  }
  os << std::flush;
  shown_ = true;
}

std::string format_duration(double s) {
  char buf[64];
  const long t = std::lround(s);
  if (s < 10)
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  else if (t < 60)
    std::snprintf(buf, sizeof buf, "%ld s", t);
  else if (t < 3600)
    std::snprintf(buf, sizeof buf, "%ld min %02ld s", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld h %02ld min", (t + 30) / 3600, (t + 30) / 60 % 60);
  return buf;
}

}  // namespace gemmax
