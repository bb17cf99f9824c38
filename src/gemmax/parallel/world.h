// The ranks of this process's run, and the checks that they agree.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

#include "gemmax/parallel/comm.h"

namespace gemmax {

// Whether an MPI launcher (mpirun, srun) started this process, and with how many ranks (0: none).
int launched_ranks();

// MPI's world when an MPI launcher started the process (gemmax built with MPI), else one rank.
// Throws if a launcher asks for several ranks from a build without MPI.
std::unique_ptr<Comm> make_world(int* argc, char*** argv);

// Refuses ranks started with different configs: each compares its resolved config with rank 0's
// and, if any differs, every rank fails with a message naming the first such rank and the keys.
void check_same_config(Comm& comm, const nlohmann::json& config);

}  // namespace gemmax
