#include "gemmax/parallel/world.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "gemmax/base/module_interface.h"  // generated: GEMMAX_MODULE_INTERFACE
#include "gemmax/base/error.h"
#include "gemmax/base/shared_module.h"
#include "gemmax/parallel/comm_mpi.h"

// Set by the build when it makes the MPI module (CMake found Open MPI).
#ifndef GEMMAX_MPI_MODULE_BUILT
#define GEMMAX_MPI_MODULE_BUILT 0
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
  // One process needs no MPI: it is neither loaded nor initialised.
  const int launched = launched_ranks();
  if (launched <= 1) return std::make_unique<SingleComm>();
  const SharedModule m = open_shared_module(
      kMpiModuleFile, "GEMMAX_MPI_MODULE",
      "Open MPI's libraries (Debian's libopenmpi3 and openmpi-bin, as scripts/install_deps.sh "
      "installs them)");
  if (m.failure == SharedModule::Failure::kNotFound)
    fail("this process was started as one of ", launched, " ranks, but ",
         GEMMAX_MPI_MODULE_BUILT ? str_cat("its MPI module is missing: ", m.error,
                                           ". Copy it from the build's bin/ folder next to the "
                                           "binary, or point GEMMAX_MPI_MODULE at it")
                                 : str_cat("gemmax was built without MPI (", m.error,
                                           "): install Open MPI (scripts/install_deps.sh installs "
                                           "libopenmpi-dev) and rebuild, or run one process"));
  if (m.handle == nullptr) fail("this process was started as one of ", launched, " ranks: ", m.error);
  using Interface = decltype(&gemmax_mpi_interface);
  using World = decltype(&gemmax_mpi_world);
  auto interface = reinterpret_cast<Interface>(module_symbol(m, "gemmax_mpi_interface"));
  auto world = reinterpret_cast<World>(module_symbol(m, "gemmax_mpi_world"));
  if (interface == nullptr || world == nullptr)
    fail(m.path, " is not gemmax's MPI module: point GEMMAX_MPI_MODULE at the ", kMpiModuleFile,
         " built with this gemmax");
  if (std::string(interface()) != GEMMAX_MODULE_INTERFACE __VERSION__)
    fail("the MPI module ", m.path, " was built from other gemmax sources than this binary: "
         "rebuild both from one tree, or point GEMMAX_MPI_MODULE at the ", kMpiModuleFile,
         " built with this gemmax");
  return std::unique_ptr<Comm>(world(argc, argv));
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
