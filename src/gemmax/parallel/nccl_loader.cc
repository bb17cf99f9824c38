// make_nccl_comm: the NCCL comm of the cuda module, reached by name (comm_nccl.h).
#include "gemmax/backend/cuda/module_api.h"
#include "gemmax/backend/cuda_module.h"
#include "gemmax/base/error.h"
#include "gemmax/parallel/comm_nccl.h"

namespace gemmax {

std::unique_ptr<Comm> make_nccl_comm(Comm& bootstrap, int device, void* compute_stream,
                                     void* comm_stream) {
  using Entry = decltype(&gemmax_make_nccl_comm);
  auto entry = reinterpret_cast<Entry>(cuda::cuda_module_symbol(kNcclCommEntry));
  if (entry == nullptr)
    fail("backend=cuda on ", bootstrap.size(), " ranks needs the NCCL comm, and the cuda module ",
         cuda::cuda_module().path,
         " was built without it: rebuild with CUDA, NCCL and MPI found (cmake -DGEMMAX_NCCL=ON), "
         "or train on several ranks with backend=cpu");
  return std::unique_ptr<Comm>(entry(&bootstrap, device, compute_stream, comm_stream));
}

}  // namespace gemmax
