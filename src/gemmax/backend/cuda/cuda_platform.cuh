// CudaPlatform::launch: a kernel functor on the compute stream. Included by the .cu files that
// instantiate the op layer for the GPU.
#pragma once

#include <typeinfo>

#include "gemmax/backend/cuda/cuda_backend.h"
#include "gemmax/backend/cuda/exec_device.cuh"

namespace gemmax::cuda {

template <class K, class... A>
void CudaPlatform::launch(const Launch& l, A... args) {
  auto* kernel = [] {
    if constexpr (requires { K::kGridConstant; }) {
      static_assert(sizeof...(A) == 1, "a kGridConstant kernel takes one parameter struct");
      return &run_kernel_grid_constant<K, A...>;
    }
    else
      return &run_kernel<K, A...>;
  }();
  // More than 48 KiB of dynamic shared memory must be asked for, once per kernel and size.
  static size_t granted = 48 * 1024;
  if (l.smem > granted) {
    check_cuda(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(l.smem)),
        typeid(K).name());
    granted = l.smem;
  }
  note_launch(typeid(K).name());
  kernel<<<dim3(l.gx, l.gy, l.gz), dim3(l.threads), l.smem, compute_>>>(args...);
  check_launch(typeid(K).name());
}

}  // namespace gemmax::cuda
