// One function per subcommand; main.cc dispatches on argv[1].
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "gemmax/config/config.h"
#include "gemmax/train/train_hooks.h"

namespace gemmax {

// Each takes the arguments after the subcommand name and returns the process exit code.
int cmd_train(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_info(int argc, char** argv);
int cmd_grad(int argc, char** argv);
int cmd_export(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_sample(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_bench(int argc, char** argv);

// cmd_train with callbacks for tests (the fault tests' driver): `hooks_of(rank)` gives each
// rank's.
int train_with_hooks(int argc, char** argv, const std::function<TrainHooks(int rank)>& hooks_of);

// `[config.yml] [key=value ...]`, MaxText's command-line form, into a Config.
Config config_from_args(int argc, char** argv);

}  // namespace gemmax
