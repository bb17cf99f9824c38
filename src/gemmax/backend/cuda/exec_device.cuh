// The GPU execution context of the kernels (kernels/kernel_base.h), and the one __global__
// function that runs any kernel functor. Compiled by nvcc only; the host twin is emu/emu_exec.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gemmax/backend/cuda/kernels/kernel_base.h"

namespace gemmax::cuda {

struct DeviceExec {
  __device__ __forceinline__ int tid() const { return int(threadIdx.x); }
  __device__ __forceinline__ int nthreads() const { return int(blockDim.x); }
  __device__ __forceinline__ uint32_t bx() const { return blockIdx.x; }
  __device__ __forceinline__ uint32_t by() const { return blockIdx.y; }
  __device__ __forceinline__ uint32_t bz() const { return blockIdx.z; }
  __device__ __forceinline__ uint32_t gx() const { return gridDim.x; }
  __device__ __forceinline__ uint32_t gy() const { return gridDim.y; }
  __device__ __forceinline__ uint32_t gz() const { return gridDim.z; }
  __device__ __forceinline__ int lane() const { return int(threadIdx.x) & 31; }

  __device__ __forceinline__ void sync() { __syncthreads(); }
  __device__ __forceinline__ void syncwarp() { __syncwarp(); }
  template <class T = char>
  __device__ __forceinline__ T* smem() {
    extern __shared__ __align__(128) unsigned char gemmax_dynamic_smem[];
    return reinterpret_cast<T*>(gemmax_dynamic_smem);
  }

  template <class T>
  __device__ __forceinline__ T shfl_xor(T v, int mask) {
    return __shfl_xor_sync(0xffffffffu, v, mask);
  }
  template <class T>
  __device__ __forceinline__ T shfl(T v, int src) {
    return __shfl_sync(0xffffffffu, v, src);
  }
  __device__ __forceinline__ uint32_t ballot(bool p) { return __ballot_sync(0xffffffffu, p); }
  __device__ __forceinline__ uint32_t match_any(int32_t v) {
    return __match_any_sync(0xffffffffu, v);
  }

  template <class T>
  __device__ __forceinline__ T atomic_add(T* p, T v) {
    return atomicAdd(p, v);
  }
  __device__ __forceinline__ int32_t atomic_cas(int32_t* p, int32_t compare, int32_t v) {
    return atomicCAS(p, compare, v);
  }
  __device__ __forceinline__ void fence() { __threadfence(); }

  __device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row)));
  }
  __device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row)));
  }
  __device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_addr(row)));
  }
  __device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_addr(row)));
  }
  __device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4],
                                           const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }

  __device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
  }
  __device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
  template <int N>
  __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
  }

 private:
  __device__ __forceinline__ static uint32_t smem_addr(const void* p) {
    return uint32_t(__cvta_generic_to_shared(p));
  }
};

// Blocks per SM a kernel asks registers for (K::kMinBlocks, else 1).
template <class K>
constexpr int min_blocks() {
  if constexpr (requires { K::kMinBlocks; })
    return K::kMinBlocks;
  else
    return 1;
}

// Runs kernel functor K on every thread of the grid.
template <class K, class... A>
__global__ void __launch_bounds__(K::kMaxThreads, min_blocks<K>()) run_kernel(A... args) {
  DeviceExec x;
  K{}(x, args...);
}

}  // namespace gemmax::cuda
