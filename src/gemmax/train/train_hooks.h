// Callbacks at fixed points of a training run, for whoever embeds the trainer: tests and the fault
// tests' driver (tests/support/fault_train.cc) use them to make a rank fail at a chosen
// moment. The shipped `gemmax train` installs none, so a run never reads a test key or takes a
// test branch.
#pragma once

#include <cstdint>
#include <functional>

namespace gemmax {

class Backend;
class ParamTable;
struct TrainState;

struct TrainHooks {
  // Before the trainer sets anything up (after the ranks agreed on the config).
  std::function<void()> at_start;
  // While the weights load (a stop request then waits for the load to end).
  std::function<void()> while_loading;
  // Before step `step` (0-based) reads its batch.
  std::function<void(int64_t step)> before_step;
  // After each file this rank writes of the checkpoint of `steps_done` steps.
  std::function<void(int64_t steps_done)> after_checkpoint_file;
  // After the backward of update `t` (1-based), before the gradient norm: may change this rank's
  // gradients (state.grads, laid out by state.layout over `table`). Called once for the pieces
  // that are not `replicated`, then once for those that are (a sharded step sums their squares
  // apart, after their all-reduce).
  std::function<void(Backend& be, const ParamTable& table, const TrainState& state, int64_t t,
                     bool replicated)>
      after_backward;
};

}  // namespace gemmax
