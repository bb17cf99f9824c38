#include "gemmax/parallel/world.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "gemmax/base/error.h"
#ifdef GEMMAX_HAVE_MPI
#include "gemmax/parallel/comm_mpi.h"
#endif

namespace gemmax {
namespace {

// The launchers' rank-count variables: Open MPI, PMI (MPICH, Slurm), PMIx.
int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : 0;
}

Tensor text_tensor(const std::string& s) {
  Tensor t = control_buffer({int64_t(s.size())}, DType::U8);
  if (!s.empty()) std::memcpy(t.raw(), s.data(), s.size());
  return t;
}

// Rank `root`'s string on every rank.
std::string broadcast_text(Comm& comm, const std::string& mine, int root, const std::string& what) {
  Tensor size = control_buffer({1}, DType::I64);
  size.data<int64_t>()[0] = int64_t(mine.size());
  comm.broadcast(size, root, "the size of " + what).wait();
  Tensor text = comm.rank() == root ? text_tensor(mine)
                                    : control_buffer({size.data<int64_t>()[0]}, DType::U8);
  if (text.numel() > 0) comm.broadcast(text, root, what).wait();
  return std::string(static_cast<const char*>(text.numel() ? text.raw() : ""),
                     size_t(text.numel()));
}

}  // namespace

int launched_ranks() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (env_int(v) > 0) return env_int(v);
  return 0;
}

std::unique_ptr<Comm> make_world(int* argc, char*** argv) {
  const int launched = launched_ranks();
#ifdef GEMMAX_HAVE_MPI
  if (launched > 0) return MpiComm::world(argc, argv);
#else
  if (launched > 1)
    fail("this process was started as one of ", launched,
         " ranks, but gemmax was built without MPI: install Open MPI (scripts/install_deps.sh "
         "installs libopenmpi-dev) and rebuild, or run one process");
#endif
  return std::make_unique<SingleComm>();
}

void check_same_config(Comm& comm, const nlohmann::json& config) {
  if (comm.size() == 1) return;
  const std::string root_text = broadcast_text(comm, config.dump(), 0, "rank 0's config");
  std::string diff;
  if (root_text != config.dump()) {
    const nlohmann::json root = nlohmann::json::parse(root_text);
    for (const auto& [key, value] : config.items()) {
      const bool same = root.contains(key) && root[key] == value;
      if (same) continue;
      diff += str_cat(diff.empty() ? "" : ", ", key, "=", value.dump(), " there vs ",
                      root.contains(key) ? root[key].dump() : std::string("(unset)"), " on rank 0");
    }
    if (diff.empty()) diff = "keys missing there that rank 0 has";
  }
  Tensor flags = control_buffer({comm.size()}, DType::I64);
  Tensor mine = control_buffer({1}, DType::I64);
  mine.data<int64_t>()[0] = diff.empty() ? 0 : 1;
  comm.all_gather(mine, flags, "the config checks").wait();
  for (int r = 0; r < comm.size(); ++r) {
    if (flags.data<int64_t>()[r] == 0) continue;
    const std::string what = broadcast_text(comm, diff, r, "a config difference");
    fail("rank ", r, " of ", comm.size(), " was started with a different config than rank 0 (",
         what, "): start every rank with the same config file and key=value arguments");
  }
}

}  // namespace gemmax
