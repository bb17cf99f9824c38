#include "gemmax/train/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "gemmax/base/error.h"
#include "gemmax/io/atomic_file.h"

namespace gemmax {
namespace {

// Written by the handler, read by the training loop: lock-free atomics are signal-safe.
std::atomic<int> g_received{0};             // the first stop signal, or 0
std::atomic<int> g_terminal_interrupts{0};  // SIGINTs from the terminal driver (Ctrl-C)
std::atomic<bool> g_forced{false};
std::atomic<bool> g_saving{false};
std::atomic<bool> g_alive{false};  // a StopSignal exists
// Outside a StopSignal (install_at_startup): before training, loading, or after the loop.
enum Phase : int { kStarting, kLoading, kFinished };
std::atomic<int> g_phase{kStarting};
std::atomic<int> g_before_start{0};  // the signal that arrived while loading
bool g_startup_installed = false;
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free);

const int kSignals[] = {SIGINT, SIGTERM};
struct sigaction g_previous[2];
bool g_installed[2] = {false, false};

[[noreturn]] void die_by_sigint() {
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGINT, &dfl, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(SIGINT);
  ::_exit(130);  // not reached: SIGINT's default action ends the process
}

// write() is async-signal-safe; stdio is not.
void say(const char* text) {
  size_t n = 0;
  while (text[n] != 0) ++n;
  [[maybe_unused]] const ssize_t w = ::write(STDERR_FILENO, text, n);
}

// A stop request while no StopSignal lives (handlers from install_at_startup).
void outside_training(int sig) {
  const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
  const int phase = g_phase.load();
  if (phase == kStarting) {
    say("\ngemmax: ");
    say(name);
    say(" before training started: nothing was started\n");
    ::_exit(0);
  }
  int none = 0;
  if (phase == kLoading && g_before_start.compare_exchange_strong(none, sig)) {
    say("\ngemmax: ");
    say(name);
    say(" while loading: stopping when the load ends, before anything is written\n");
  }
  // kFinished: the run has ended and is on its way out; a repeat changes nothing.
}

extern "C" void on_stop_signal(int sig, siginfo_t* info, void*) {
  const int saved_errno = errno;  // the interrupted code may be reading errno
  if (!g_alive.load()) {
    outside_training(sig);
    errno = saved_errno;
    return;
  }
  // The terminal driver sends Ctrl-C with si_code SI_KERNEL; kill() (launchers, schedulers,
  // `kill` in a shell) sends SI_USER. Only a person can press Ctrl-C twice.
  const bool from_terminal = sig == SIGINT && info != nullptr && info->si_code == SI_KERNEL;
  int none = 0;
  if (g_received.compare_exchange_strong(none, sig)) {
    say(from_terminal   ? "\ngemmax: Ctrl-C: stopping after this step (Ctrl-C again: stop at once, "
                          "without saving)\n"
        : sig == SIGINT ? "\ngemmax: SIGINT: stopping after this step\n"
                        : "\ngemmax: SIGTERM: stopping after this step\n");
  }
  if (from_terminal && g_terminal_interrupts.fetch_add(1) + 1 >= 2) {
    say("\ngemmax: Ctrl-C again: stopping at once\n");
    g_forced.store(true);
    set_writes_interrupted(true);
    // In a save, its writes now fail and remove what they wrote; the loop then ends the process.
    if (!g_saving.load()) die_by_sigint();
  }
  errno = saved_errno;
}

}  // namespace

void StopSignal::install_at_startup() {
  if (g_startup_installed) return;
  g_startup_installed = true;
  g_phase = kStarting;
  struct sigaction sa = {};
  sa.sa_sigaction = on_stop_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int s : kSignals) sigaddset(&sa.sa_mask, s);
  for (int i = 0; i < 2; ++i) {
    if (::sigaction(kSignals[i], nullptr, &g_previous[i]) != 0) continue;
    const bool ignored =
        !(g_previous[i].sa_flags & SA_SIGINFO) && g_previous[i].sa_handler == SIG_IGN;
    if (!ignored) g_installed[i] = ::sigaction(kSignals[i], &sa, nullptr) == 0;
  }
}

void StopSignal::restore_startup_handlers() {
  if (!g_startup_installed || g_alive.load()) return;
  for (int i = 0; i < 2; ++i)
    if (g_installed[i] && ::sigaction(kSignals[i], &g_previous[i], nullptr) == 0)
      g_installed[i] = false;
  g_startup_installed = false;
}

StopSignal::Loading::Loading() {
  if (g_phase.load() == kStarting) g_phase = kLoading;
}

StopSignal::Loading::~Loading() {
  if (g_phase.load() == kLoading) g_phase = kStarting;
}

int StopSignal::requested_before_start() { return g_before_start.load(); }

StopSignal::StopSignal() {
  GEMMAX_CHECK(!g_alive.exchange(true), "only one StopSignal may live at a time");
  g_received = 0;
  g_terminal_interrupts = 0;
  g_forced = false;
  g_saving = false;
  struct sigaction sa = {};
  sa.sa_sigaction = on_stop_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int s : kSignals) sigaddset(&sa.sa_mask, s);  // one handler runs at a time
  for (int i = 0; i < 2; ++i) {
    struct sigaction now = {};
    if (::sigaction(kSignals[i], nullptr, &now) != 0) continue;
    // Left installed by an earlier StopSignal that was asked to stop: g_previous still holds
    // the handler from before it.
    if (g_installed[i] && (now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_stop_signal)
      continue;
    g_installed[i] = false;
    g_previous[i] = now;
    const bool ignored =
        !(g_previous[i].sa_flags & SA_SIGINFO) && g_previous[i].sa_handler == SIG_IGN;
    if (!ignored) g_installed[i] = ::sigaction(kSignals[i], &sa, nullptr) == 0;
  }
}

StopSignal::~StopSignal() {
  // After a stop request the handlers stay (see stop_signal.h): further signals are repeats.
  // Installed at start-up, they stay too: the run is finishing. Either way the run has ended,
  // so a signal that reaches the handlers from now on is a repeat, never a request to stop a
  // run that has not started (which would end the process at once).
  g_phase = kFinished;
  if (g_received.load() == 0 && !g_startup_installed)
    for (int i = 0; i < 2; ++i)
      if (g_installed[i] && ::sigaction(kSignals[i], &g_previous[i], nullptr) == 0)
        g_installed[i] = false;
  set_writes_interrupted(false);
  g_alive = false;
}

int StopSignal::received() const { return g_received.load(); }

bool StopSignal::forced() const { return g_forced.load(); }

StopSignal::Saving::Saving() { g_saving = true; }

StopSignal::Saving::~Saving() { g_saving = false; }

void StopSignal::die_by_forced_stop() { die_by_sigint(); }

const char* StopSignal::name(int signal) {
  return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal";
}

}  // namespace gemmax
