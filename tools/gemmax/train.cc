// gemmax train [config.yml] [key=value ...]
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "commands.h"
#include "gemmax/backend/backend_factory.h"
#include "gemmax/config/run_config.h"
#include "gemmax/parallel/world.h"
#include "gemmax/train/memory_budget.h"
#include "gemmax/train/stop_signal.h"
#include "gemmax/train/trainer.h"

namespace gemmax {

Config config_from_args(int argc, char** argv) {
  std::string file;
  std::vector<std::string> overrides;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.find('=') != std::string::npos) {
      overrides.push_back(a);
    } else if (file.empty() && overrides.empty() && (a.ends_with(".yml") || a.ends_with(".yaml"))) {
      file = a;
    } else {
      fail("unexpected argument '", a, "': expected [config.yml] then key=value overrides");
    }
  }
  return Config::load(file, overrides);
}

int cmd_train(int argc, char** argv) { return train_with_hooks(argc, argv, {}); }

int train_with_hooks(int argc, char** argv, const std::function<TrainHooks(int rank)>& hooks_of) {
  StopSignal::install_at_startup();  // a stop request from here on is handled (stop_signal.h)
  if (argc > 0 && (!std::strcmp(argv[0], "--help") || !std::strcmp(argv[0], "-h"))) {
    std::cout << "usage: gemmax train [config.yml] [key=value ...]\n\n"
                 "Trains a Gemma-4 MoE model. Keys and defaults: configs/base.yml "
                 "(built in).\n"
                 "With no arguments, trains the gemma4-tiny preset on the built-in "
                 "corpus.\n"
                 "Examples:\n"
                 "  gemmax train steps=100 learning_rate=1e-3\n"
                 "  gemmax train model_name=gemma4-small dataset_type=synthetic "
                 "steps=5\n"
                 "  gemmax train run.yml run_name=exp1\n"
                 "  gemmax train model_name=gemma4-26b-a4b per_device_batch_size=2 "
                 "\\\n"
                 "      max_target_length=16384 ici_fsdp_parallelism=128 "
                 "dry_run=true\n"
                 "With dry_run=true it prints the memory plan per device and stops, "
                 "allocating\n"
                 "nothing; max_memory_gb=G refuses (exit 1) a plan above G GiB.\n"
                 "Under mpirun (mpirun -np N gemmax train ...) the N ranks train one model with\n"
                 "FSDP, each on per_device_batch_size rows of the global batch (docs/FSDP.md).\n";
    return 0;
  }
  const Config config = config_from_args(argc, argv);
  if (config.get_bool("dry_run")) {  // read before the ranks start: a dry run starts none
    if (const std::string l = config.ignored_keys_line(); !l.empty()) std::cout << l << "\n";
    const std::string model_keys = maxtext_model_keys(model_config_from(config));
    std::cout << "model: " << model_keys << "\n";
    const TrainConfig tc = train_config_from(config);
    const auto backend = make_backend(backend_options(tc));
    const MemoryPlan plan = plan_memory(memory_plan_input(tc), *backend);
    std::cout << format_memory_plan(plan);
    check_memory_limit(tc, plan);
    if (tc.run.max_memory_gb > 0)
      std::cout << "fits in max_memory_gb=" << tc.run.max_memory_gb << " GiB\n";
    return 0;
  }
  // Under an MPI launcher every rank runs this; an error on one rank ends them all, since the
  // others would wait for it in their next collective.
  std::unique_ptr<Comm> world = make_world(&argc, &argv);
  try {
    Trainer trainer(config, world.get(), hooks_of ? hooks_of(world->rank()) : TrainHooks());
    trainer.run(std::cout);
  } catch (const std::exception& e) {
    if (world->size() == 1) throw;
    std::fprintf(stderr, "error: rank %d of %d: %s\n", world->rank(), world->size(), e.what());
    std::fflush(stderr);
    world->abort(1);
  }
  return 0;
}

}  // namespace gemmax
