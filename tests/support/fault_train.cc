// gemmax_fault_train FAULT [config.yml] [key=value ...]: `gemmax train` with one rank's fault
// installed as TrainHooks, for the fault tests (FsdpFaults.*, StartupSignal.*). FAULT is
// RANK:STEP:KIND: rank RANK, at step STEP, hangs, exits without a word to the other ranks, is
// killed after writing a file of its checkpoint shard (save), puts a NaN in its gradient piece
// (nan), or raises SIGTERM on itself (sigterm; STEP -2: before setup, -1: while the weights load).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>

#include "commands.h"
#include "fault_hooks.h"
#include "gemmax/base/error.h"

namespace gemmax {
namespace {

struct Fault {
  int64_t rank = -1, step = -1;
  std::string kind;
};

Fault parse_fault(const std::string& spec) {
  Fault f;
  const size_t a = spec.find(':'), b = spec.find(':', a == std::string::npos ? a : a + 1);
  try {
    if (a == std::string::npos || b == std::string::npos) throw std::invalid_argument(spec);
    f.rank = std::stoll(spec.substr(0, a));
    f.step = std::stoll(spec.substr(a + 1, b - a - 1));
    f.kind = spec.substr(b + 1);
  } catch (const std::exception&) {
    fail("fault '", spec, "' is not RANK:STEP:KIND");
  }
  if (f.kind != "hang" && f.kind != "exit" && f.kind != "save" && f.kind != "nan" &&
      f.kind != "sigterm")
    fail("fault '", spec, "': KIND must be hang, exit, save, nan or sigterm");
  return f;
}

void announce(const Fault& f) {
  std::fprintf(stderr, "gemmax_fault_train: rank %lld: %s at step %lld\n", (long long)f.rank,
               f.kind.c_str(), (long long)f.step);
  std::fflush(stderr);
}

// What the fault does when its moment comes (all kinds but nan).
void strike(const Fault& f) {
  announce(f);
  if (f.kind == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  if (f.kind == "exit") std::_Exit(7);  // leaves without a word to the other ranks
  if (f.kind == "sigterm") {            // a stop request that reaches this rank alone
    std::raise(SIGTERM);
    return;
  }
  std::raise(SIGKILL);  // save: killed half-way through writing its shard
}

TrainHooks hooks_of(const Fault& f, int rank) {
  TrainHooks h;
  if (rank != f.rank) return h;
  if (f.kind == "sigterm" && f.step == -2) {
    h.at_start = [f] { strike(f); };
  } else if (f.kind == "sigterm" && f.step == -1) {
    h.while_loading = [f] { strike(f); };
  } else if (f.kind == "save") {
    h.after_checkpoint_file = [f](int64_t done) {
      if (done == f.step) strike(f);
    };
  } else if (f.kind == "nan") {
    // The first trained parameter whose first element this rank holds in a sharded piece, at
    // update STEP + 1 (step STEP): the other ranks' gradients stay finite.
    h.after_backward = [f](Backend& be, const ParamTable& table, const TrainState& state, int64_t t,
                           bool replicated) {
      if (t != f.step + 1 || replicated) return;
      for (size_t i = 0; i < table.specs().size(); ++i) {
        const ParamPiece& p = state.layout.pieces[i];
        if (p.count == 0 || p.begin != 0 || p.replicated) continue;
        if (!state.optimizer->moments_of(i).first.defined()) continue;  // frozen
        announce(f);
        testing::poison_gradient(be, state, i, false);
        return;
      }
    };
  } else {
    h.before_step = [f](int64_t step) {
      if (step == f.step) strike(f);
    };
  }
  return h;
}

}  // namespace
}  // namespace gemmax

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: gemmax_fault_train RANK:STEP:KIND [config.yml] [key=value ...]\n");
    return 2;
  }
  try {
    const gemmax::Fault f = gemmax::parse_fault(argv[1]);
    return gemmax::train_with_hooks(argc - 2, argv + 2,
                                    [&](int rank) { return gemmax::hooks_of(f, rank); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
