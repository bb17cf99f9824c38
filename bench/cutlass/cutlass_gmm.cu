// CUTLASS's sm90 grouped GEMM for the grouped matmul's products (cutlass_gmm.h). Each product is
// one instantiation of the ptr-array kernel, which differ only in which stride of each operand
// is the unit one (gmm_grouped_args.h maps them onto the library's terms).
#include <cuda_runtime.h>

#include <cstring>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass_gmm.h"
#include "gemmax/backend/cuda/exec_device.cuh"
#include "gemmax/base/error.h"

namespace gemmax::cutlass_gmm {
namespace {

using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
using Bf16 = cutlass::bfloat16_t;

// One product: A and B layouts in CUTLASS's terms (RowMajor A: K is the unit stride; ColumnMajor
// B: K is the unit stride), D row-major of type ED. 128 x 128 x 64 tiles, no cluster (the own
// kernel has none either), the cooperative schedule (two consumer warpgroups on one tile).
template <class LayoutA, class LayoutB, class ED>
struct Product {
  using Tile = cute::Shape<cute::_128, cute::_128, cute::_64>;
  using Cluster = cute::Shape<cute::_1, cute::_1, cute::_1>;
  static constexpr int kAlignIn = 8, kAlignOut = 16 / int(sizeof(ED));
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, ED, cutlass::layout::RowMajor*,
      kAlignOut, ED, cutlass::layout::RowMajor*, kAlignOut,
      cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
      cutlass::epilogue::fusion::LinearCombination<ED, float>>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Bf16, LayoutA*, kAlignIn, Bf16, LayoutB*,
      kAlignIn, float, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using ElementOut = ED;
};

using Forward = Product<cutlass::layout::RowMajor, cutlass::layout::ColumnMajor, Bf16>;
using Dlhs = Product<cutlass::layout::RowMajor, cutlass::layout::RowMajor, Bf16>;
using Drhs = Product<cutlass::layout::ColumnMajor, cutlass::layout::RowMajor, float>;

// GroupedGemmArgsKernel writes each stride as one int64 and each shape as three int32: the
// library's types must be exactly that (checked once, on the host, for every type used).
template <int kDynamic, class Stride>
void check_stride_layout(const char* what) {
  static_assert(sizeof(Stride) == sizeof(int64_t), "a stride with more than one dynamic value");
  Stride s{};
  cute::get<kDynamic>(s) = 12345;
  int64_t v = 0;
  std::memcpy(&v, &s, sizeof v);
  GEMMAX_CHECK(v == 12345, "CUTLASS's ", what, " stride is not one int64 at offset 0");
}
void check_layouts() {
  using Shape = ProblemShape::UnderlyingProblemShape;
  static_assert(sizeof(Shape) == 3 * sizeof(int32_t));
  const Shape s = cute::make_shape(1, 2, 3);
  int32_t v[3];
  std::memcpy(v, &s, sizeof v);
  GEMMAX_CHECK(v[0] == 1 && v[1] == 2 && v[2] == 3, "CUTLASS's problem shape is not M, N, K");
  check_stride_layout<0, Forward::Kernel::InternalStrideA>("forward A");
  check_stride_layout<0, Forward::Kernel::InternalStrideB>("forward B");
  check_stride_layout<0, Forward::Kernel::InternalStrideD>("forward D");
  check_stride_layout<0, Dlhs::Kernel::InternalStrideA>("dlhs A");
  check_stride_layout<1, Dlhs::Kernel::InternalStrideB>("dlhs B");
  check_stride_layout<0, Dlhs::Kernel::InternalStrideD>("dlhs D");
  check_stride_layout<1, Drhs::Kernel::InternalStrideA>("drhs A");
  check_stride_layout<1, Drhs::Kernel::InternalStrideB>("drhs B");
  check_stride_layout<0, Drhs::Kernel::InternalStrideD>("drhs D");
}

void check_cuda(cudaError_t e, const char* what) {
  GEMMAX_CHECK(e == cudaSuccess, "CUTLASS grouped GEMM: ", what, ": ", cudaGetErrorString(e));
}
void check_cutlass(cutlass::Status s, const char* what) {
  GEMMAX_CHECK(s == cutlass::Status::kSuccess, "CUTLASS grouped GEMM: ", what, ": ",
               cutlassGetStatusString(s));
}

}  // namespace

struct GroupedGemm::State {
  cudaStream_t stream;
  int device = 0, sms = 0;
  int64_t G = 0;           // the arrays' capacity in groups
  char* arrays = nullptr;  // the group table, then the library's per-group arrays
  kern::DeviceError* err = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  kern::GroupedGemmArrays view{};
  int32_t* table = nullptr;

  void reserve(int64_t groups) {
    if (groups <= G) return;
    if (arrays) check_cuda(cudaFree(arrays), "cudaFree");
    // int64 and pointer arrays first (8-byte aligned), then the int32 ones.
    const size_t bytes = size_t(groups) * (6 * 8 + 3 * 4) + size_t(2 * (groups + 1)) * 4;
    check_cuda(cudaMalloc(&arrays, bytes), "cudaMalloc of the per-group arrays");
    G = groups;
    auto* p8 = reinterpret_cast<int64_t*>(arrays);
    view.a = reinterpret_cast<const void**>(p8);
    view.b = reinterpret_cast<const void**>(p8 + G);
    view.d = reinterpret_cast<void**>(p8 + 2 * G);
    view.lda = p8 + 3 * G;
    view.ldb = p8 + 4 * G;
    view.ldd = p8 + 5 * G;
    view.shape = reinterpret_cast<int32_t*>(p8 + 6 * G);
    table = view.shape + 3 * G;
  }

  template <class P>
  void launch(const Problem& p) {
    using Gemm = typename P::Gemm;
    using K = typename P::Kernel;
    using EO = typename P::ElementOut;
    typename Gemm::Arguments args;
    decltype(args.epilogue.thread) fusion{};
    fusion.alpha = 1.0f;
    fusion.beta = p.accumulate || p.product == kern::GroupedProduct::kDrhs ? 1.0f : 0.0f;
    cutlass::KernelHardwareInfo hw;
    hw.device_id = device;
    hw.sm_count = sms;  // set, not left 0: some kernels size their workspace from it
    args = typename Gemm::Arguments{
        cutlass::gemm::GemmUniversalMode::kGrouped,
        {int(p.G), reinterpret_cast<ProblemShape::UnderlyingProblemShape*>(view.shape), nullptr},
        {reinterpret_cast<const Bf16**>(view.a),
         reinterpret_cast<typename K::InternalStrideA*>(view.lda),
         reinterpret_cast<const Bf16**>(view.b),
         reinterpret_cast<typename K::InternalStrideB*>(view.ldb)},
        {fusion, static_cast<const EO**>(static_cast<void*>(view.d)),
         reinterpret_cast<typename K::InternalStrideC*>(view.ldd), reinterpret_cast<EO**>(view.d),
         reinterpret_cast<typename K::InternalStrideD*>(view.ldd)},
        hw};
    Gemm gemm;
    check_cutlass(gemm.can_implement(args), "can_implement");
    const size_t need = Gemm::get_workspace_size(args);
    if (need > workspace_bytes) {
      if (workspace) check_cuda(cudaFree(workspace), "cudaFree");
      check_cuda(cudaMalloc(&workspace, need), "cudaMalloc of the workspace");
      workspace_bytes = need;
    }
    check_cutlass(gemm.initialize(args, workspace, stream), "initialize");
    check_cutlass(gemm.run(stream), "run");
  }
};

GroupedGemm::GroupedGemm(void* stream) : s_(std::make_unique<State>()) {
  check_layouts();
  s_->stream = static_cast<cudaStream_t>(stream);
  check_cuda(cudaGetDevice(&s_->device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&s_->sms, cudaDevAttrMultiProcessorCount, s_->device),
             "cudaDeviceGetAttribute");
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, s_->device), "cudaGetDeviceProperties");
  GEMMAX_CHECK(prop.major == 9 && prop.minor == 0, "CUTLASS grouped GEMM: ", prop.name, " is sm_",
               prop.major, prop.minor, "; these kernels are built for sm_90a (H100, H200) only");
  check_cuda(cudaMalloc(&s_->err, sizeof(kern::DeviceError)), "cudaMalloc");
  check_cuda(cudaMemsetAsync(s_->err, 0, sizeof(kern::DeviceError), s_->stream), "cudaMemset");
}

GroupedGemm::~GroupedGemm() {
  cudaStreamSynchronize(s_->stream);
  cudaFree(s_->arrays);
  cudaFree(s_->workspace);
  cudaFree(s_->err);
}

void GroupedGemm::run(const Problem& p) {
  using kern::GroupedProduct;
  const char* name = p.product == GroupedProduct::kForward ? "forward"
                     : p.product == GroupedProduct::kDlhs  ? "dlhs"
                                                           : "drhs";
  // TMA needs 16-byte aligned rows and bases: every row length a multiple of 8 bfloat16 (4
  // float32 for drhs's dW).
  GEMMAX_CHECK(p.G > 0 && p.k % 8 == 0 && p.n % 8 == 0 && p.w0 >= 0 && p.w0 + p.n <= p.N,
               "CUTLASS grouped GEMM (", name, "): k = ", p.k, " and n = ", p.n,
               " must be multiples of 8, the window [", p.w0, ", ", p.w0 + p.n,
               ") inside N = ", p.N, ", over G = ", p.G, " > 0 groups");
  for (const void* q : {p.x, p.y, static_cast<const void*>(p.out)})
    GEMMAX_CHECK(reinterpret_cast<uintptr_t>(q) % 16 == 0, "CUTLASS grouped GEMM (", name,
                 "): operands must be 16-byte aligned");
  if (p.m == 0) return;
  State& s = *s_;
  s.reserve(p.G);
  using cuda::run_kernel;
  run_kernel<kern::GroupTableKernel><<<1, 256, kern::GroupTableKernel::smem_bytes(256), s.stream>>>(
      s.table, p.group_sizes, p.G, p.m, int64_t(128), s.err, int32_t(kern::kOpGmm));
  const kern::GroupedGemmParams params{.product = p.product,
                                       .first_row = s.table,
                                       .G = p.G,
                                       .m = p.m,
                                       .x = p.x,
                                       .y = p.y,
                                       .out = p.out,
                                       .k = p.k,
                                       .N = p.N,
                                       .w0 = p.w0,
                                       .n = p.n,
                                       .in_bytes = 2,
                                       .out_bytes = p.product == GroupedProduct::kDrhs ? 4 : 2};
  run_kernel<kern::GroupedGemmArgsKernel><<<uint32_t(p.G), 128, 0, s.stream>>>(params, s.view);
  check_cuda(cudaGetLastError(), "the launch of the argument kernels");
  switch (p.product) {
    case GroupedProduct::kForward:
      s.launch<Forward>(p);
      break;
    case GroupedProduct::kDlhs:
      s.launch<Dlhs>(p);
      break;
    case GroupedProduct::kDrhs:
      s.launch<Drhs>(p);
      break;
  }
}

void GroupedGemm::check() {
  check_cuda(cudaStreamSynchronize(s_->stream), "the run");
  kern::DeviceError e{};
  check_cuda(cudaMemcpy(&e, s_->err, sizeof e, cudaMemcpyDeviceToHost), "cudaMemcpy");
  GEMMAX_CHECK(e.code == kern::DeviceError::kNone, "CUTLASS grouped GEMM: group sizes add up to ",
               e.a, ", not the ", e.b, " rows (device error ", e.code, ")");
}

}  // namespace gemmax::cutlass_gmm
