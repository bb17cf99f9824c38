// The Backend of the cuda kernels, over a platform P that runs them: CudaPlatform on the GPU
// (backend=cuda) or EmuPlatform on the host (the kernels under test). Every op is its function
// in ops/, which launches kernels through P (the Backend entry points have checked the
// operands); the vocabulary-parallel loss is not implemented (fsdp_embedding=gather).
#pragma once

#include <string>

#include "gemmax/backend/backend.h"
#include "gemmax/backend/cuda/ops/ops.h"

namespace gemmax::cuda {

template <class P>
class KernelBackend : public Backend {
 public:
  P& platform() { return p_; }

 protected:
  void do_matmul(const MatmulArgs& args, NoDims) override {
    p_.matmul(args.c, args.a, args.trans_a, args.b, args.trans_b, args.accumulate);
  }
#define GEMMAX_OP_KERNELS(name, Args, family) \
  void do_##name(const Args& args, OpDims<Args> dims) override { ops::name(p_, args, dims); }
  GEMMAX_CUDA_OPS(GEMMAX_OP_KERNELS)
#undef GEMMAX_OP_KERNELS

 protected:
  P p_;
};

}  // namespace gemmax::cuda
