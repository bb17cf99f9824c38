#include "gemmax/train/stop_signal.h"

#include <csignal>

namespace gemmax {
namespace {

volatile std::sig_atomic_t g_received = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_received != 0) {  // second signal: stop now
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_received = sig;
}

}  // namespace

StopSignal::StopSignal() {
  g_received = 0;
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

StopSignal::~StopSignal() {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

int StopSignal::received() const { return g_received; }

const char* StopSignal::name(int signal) {
  return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal";
}

}  // namespace gemmax
