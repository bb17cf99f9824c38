// One function per subcommand; main.cc dispatches on argv[1].
#pragma once

namespace gemmax {

// Each takes the arguments after the subcommand name and returns the process exit code.
int cmd_train(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);

}  // namespace gemmax
