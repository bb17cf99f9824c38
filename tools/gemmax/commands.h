// One function per subcommand; main.cc dispatches on argv[1].
#pragma once

#include <string>
#include <vector>

#include "gemmax/config/config.h"

namespace gemmax {

// Each takes the arguments after the subcommand name and returns the process exit code.
int cmd_train(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_info(int argc, char** argv);
int cmd_grad(int argc, char** argv);
int cmd_export(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_sample(int argc, char** argv);
int cmd_bench(int argc, char** argv);

// `[config.yml] [key=value ...]`, MaxText's command-line form, into a Config.
Config config_from_args(int argc, char** argv);

}  // namespace gemmax
