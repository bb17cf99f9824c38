// Evaluation's cost per batch: the forward alone (eval_batch, Gemma4Model::forward_only) beside
// what evaluation ran before it, the training step's forward and backward into a gradient
// buffer, on the same model, weights and batch in one run. Rounds alternate the two, so load
// from other jobs hits them alike; each figure is the best of its rounds.
//
//   build/bin/eval_forward_only [rounds] [key=value ...]   (the run's keys: model, dtype, ...)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/train/eval.h"
#include "gemmax/train/memory_budget.h"

using namespace gemmax;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
    std::vector<std::string> args(argv + std::min(argc, 2), argv + argc);
    const TrainConfig config = train_config_from(Config::defaults(args));
    const MemoryPlanInput in = memory_plan_input(config, 1);
    const auto be = make_backend(backend_options(config));
    Gemma4Model model(in.model, *be, in.options);
    const std::vector<bool> all(model.params().specs().size(), true);
    TrainState state =
        make_train_state(*be, model.params(), all, in.weight, AdamWConfig::from(config.optimizer));
    be->fill({.x = state.weights, .value = 0.01});
    const Batch batch =
        make_data_loader(run_data_options(config, in.model.vocab_size, 0, 1))->next();
    const StepInputs inputs = upload_batch(*be, batch);
    double forward_only = 1e30, forward_backward = 1e30;
    for (int r = 0; r <= rounds; ++r) {  // round 0 warms up
      double t0 = now();
      eval_batch(*be, model, state, batch);
      const double a = now() - t0;
      t0 = now();
      be->fill({.x = state.grads, .value = 0.0});
      model.forward_backward(inputs, state.weights, state.grads, state.scalars);
      be->to_host(state.scalars);
      const double b = now() - t0;
      if (r > 0)
        forward_only = std::min(forward_only, a), forward_backward = std::min(forward_backward, b);
    }
    std::printf("model %s, batch %lld x %lld, %s, %d rounds (best of each)\n",
                in.model.name.c_str(), (long long)batch.batch, (long long)batch.seq,
                std::string(dtype_name(in.options.act)).c_str(), rounds);
    std::printf("eval batch, forward only:          %8.1f ms\n", forward_only * 1e3);
    std::printf("eval batch, forward and backward:  %8.1f ms\n", forward_backward * 1e3);
    std::printf("ratio (forward and backward / forward only): %.2fx\n",
                forward_backward / forward_only);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
