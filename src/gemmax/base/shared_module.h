// The shared modules the gemmax binary loads on demand (libgemmax_cuda.so for backend=cuda,
// libgemmax_mpi.so under an MPI launcher), so that the binary itself links none of their
// libraries. A module is looked for where its environment variable points, else beside the
// executable, else in ../lib (an installed layout) and ../bin (a test or tool binary in a folder
// beside bin/, as in the build tree). It uses the engine's symbols from the binary, which
// exports them.
#pragma once

#include <string>
#include <vector>

namespace gemmax {

struct SharedModule {
  void* handle = nullptr;  // null: not loaded, `error` says why
  std::string path;        // where it was found
  enum class Failure { kNone, kNotFound, kMissingLibrary, kOther } failure = Failure::kNone;
  std::string error;       // one line naming the file and what is wrong
  std::vector<std::string> looked_in;  // the paths tried, when not found
};

// Finds and loads `file` (dlopen, every symbol bound now). `needs`: what its libraries are, for
// the error when one is missing ("the CUDA runtime, cuBLASLt, ...").
SharedModule open_shared_module(const char* file, const char* env_var, const char* needs);

// A symbol of a loaded module, or null.
void* module_symbol(const SharedModule& m, const char* name);

}  // namespace gemmax
