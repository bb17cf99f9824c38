// The GPU execution context of the kernels (kernels/kernel_base.h), and the one __global__
// function that runs any kernel functor. Compiled by nvcc only; the host twin is emu/emu_exec.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gemmax/backend/cuda/kernels/kernel_base.h"
#include "gemmax/backend/cuda/kernels/sm90_types.h"

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

  // ---- Hopper (sm_90a): mbarrier, TMA, wgmma; the host twins are in emu/emu_sm90.h ----
  __device__ __forceinline__ uint32_t shared_addr(const void* p) { return smem_addr(p); }
  __device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
  }
  __device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
  }
  __device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
  }
  __device__ __forceinline__ bool mbarrier_try_wait(uint64_t* bar, uint32_t parity) {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
    return done != 0;
  }
  __device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
    while (!mbarrier_try_wait(bar, parity)) {
    }
  }
  // The map must live in kernel parameter space (a __grid_constant__ parameter: K::kGridConstant).
  __device__ __forceinline__ void tma_load_2d(void* dst, const kern::TensorMap2d& map, int32_t c0,
                                              int32_t c1, uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
        "{%2, %3}], [%4];\n" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(&map.driver)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
        : "memory");
  }
  __device__ __forceinline__ void tma_load_3d(void* dst, const kern::TensorMap3d& map, int32_t c0,
                                              int32_t c1, int32_t c2, uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
        "{%2, %3, %4}], [%5];\n" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(&map.driver)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
        : "memory");
  }
  __device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  // setmaxnreg.{inc,dec}.sync.aligned.u32 N: the warpgroup's registers a thread move to N (warp
  // specialisation: the producer gives registers back, the consumers take them).
  template <int N>
  __device__ __forceinline__ void setmaxnreg_inc() {
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
  }
  template <int N>
  __device__ __forceinline__ void setmaxnreg_dec() {
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
  }
  // Pins accumulator registers in place around a run of wgmma (an empty asm that reads and
  // writes them), so that the compiler moves no other read of them into the run: one would make
  // ptxas serialise the products (C7514). CUTLASS's warpgroup_fence_operand does the same.
  template <int N>
  __device__ __forceinline__ void wgmma_fence_operand(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
  }
  template <int N>
  __device__ __forceinline__ void wgmma_fence_operand(uint32_t (&a)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(a[i])::"memory");
  }
  // wgmma needs sm_90a; the PTX for later GPUs (compute_90) traps if it is ever run.
  __device__ __forceinline__ void wgmma_fence() {
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
    __trap();
#endif
  }
  __device__ __forceinline__ void wgmma_commit() {
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
  }
  template <int N>
  __device__ __forceinline__ void wgmma_wait() {
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
  }
  // wgmma.mma_async.m64nNk16.f32.bf16.bf16, A and B in shared memory: d (+)= a . b^T, each
  // operand K-major or, with its imm-trans bit (kTransA, kTransB), MN-major.
  template <int N, bool kTransA = false, bool kTransB = false>
  __device__ __forceinline__ void wgmma_bf16(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b,
                                             bool accumulate) {
    static_assert(N == 32 || N == 64 || N == 128, "the GPU side has the n32, n64, n128 shapes");
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
    if constexpr (N == 32) {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
          "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
          "}, %16, %17, p, 1, 1, %19, %20;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
            "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
            "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
          : "l"(desc_a), "l"(desc_b), "r"(int32_t(accumulate)), "n"(int(kTransA)),
            "n"(int(kTransB)));
    } else if constexpr (N == 64) {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
          "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
          "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
          "}, %32, %33, p, 1, 1, %35, %36;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
            "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
            "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
            "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
            "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
            "+f"(d[30]), "+f"(d[31])
          : "l"(desc_a), "l"(desc_b), "r"(int32_t(accumulate)), "n"(int(kTransA)),
            "n"(int(kTransB)));
    } else {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
          "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
          "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
          "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
          "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
          "}, %64, %65, p, 1, 1, %67, %68;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
            "+f"(d[6]), "+f"(d[7]),
            "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
            "+f"(d[14]), "+f"(d[15]),
            "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
            "+f"(d[22]), "+f"(d[23]),
            "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
            "+f"(d[30]), "+f"(d[31]),
            "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),
            "+f"(d[38]), "+f"(d[39]),
            "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]),
            "+f"(d[46]), "+f"(d[47]),
            "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
            "+f"(d[54]), "+f"(d[55]),
            "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]),
            "+f"(d[62]), "+f"(d[63])
          : "l"(desc_a), "l"(desc_b), "r"(int32_t(accumulate)), "n"(int(kTransA)),
            "n"(int(kTransB)));
    }
#else
    __trap();
#endif
  }
  // The register-A form, wgmma.mma_async.m64n256k16.f32.bf16.bf16: A in registers (each warp's
  // 16 rows as mma.m16n8k16's A fragment), B in shared memory, K-major or, with kTransB, MN-major.
  template <int N, bool kTransB = false>
  __device__ __forceinline__ void wgmma_bf16_rs(float (&d)[N / 2], const uint32_t (&a)[4],
                                                uint64_t desc_b, bool accumulate) {
    static_assert(N == 256, "the GPU side has the n256 register-A shape only");
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, {%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
          "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]),
          "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
          "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]),
          "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]),
          "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]),
          "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]),
          "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]),
          "+f"(d[126]), "+f"(d[127])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int32_t(accumulate)),
          "n"(int(kTransB)));
#else
    __trap();
#endif
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

// The same for kernels whose one argument must stay in kernel parameter space (K::kGridConstant:
// the tensor maps a TMA copy names by address).
template <class K, class Params>
__global__ void __launch_bounds__(K::kMaxThreads, min_blocks<K>())
    run_kernel_grid_constant(const __grid_constant__ Params params) {
  DeviceExec x;
  K{}(x, params);
}

}  // namespace gemmax::cuda
