// CUTLASS's sm90 grouped GEMM (bench/cutlass/cutlass_gmm.h) against the mma.sync kernels
// (cuda_gmm=mma, themselves tested against the reference backend) on a GPU: forward, dlhs and
// drhs; group sizes that are not multiples of the tile, empty groups at the start, in the middle
// and at the end, many small groups, weight windows, with and without accumulation. Skipped
// without a GPU (/gpu). Linked into the bench: `gmm_cutlass --test`, which bench/gpu_check.sh
// runs in stage 3. Library kernels cannot run on the cuda emulator: the argument kernel that
// feeds them is tested there (tests/backend/cuda/gmm_grouped_args_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cutlass_gmm.h"
#include "gemmax/backend/backend_factory.h"
#include "gemmax/backend/cuda_module.h"
#include "gemmax/base/rng.h"

namespace gemmax {
namespace {

using kern::GroupedProduct;

class GmmCutlass : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::cuda_device_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
    BackendOptions o;
    o.name = "cuda";
    o.cuda_gmm = CudaGmm::Mma;
    o.cuda_sync_check = true;
    be = make_backend(o);
  }

  Tensor random(const Shape& s, DType t, double scale) {
    Tensor host = Tensor::empty(s, t);
    for (int64_t i = 0; i < host.numel(); ++i) {
      const float v = float(scale * rng.normal());
      if (t == DType::F32)
        host.data<float>()[i] = v;
      else
        host.data<bf16>()[i] = bf16(v);
    }
    return be->to_device(host, MemKind::Workspace);
  }

  // max |a - b| / max |b|.
  double relative_error(const Tensor& a, const Tensor& b) {
    const Tensor ha = be->to_host(a), hb = be->to_host(b);
    auto at = [](const Tensor& t, int64_t i) {
      return t.dtype() == DType::F32 ? double(t.data<float>()[i])
                                     : double(float(t.data<bf16>()[i]));
    };
    double diff = 0, scale = 0;
    for (int64_t i = 0; i < ha.numel(); ++i) {
      diff = std::max(diff, std::abs(at(ha, i) - at(hb, i)));
      scale = std::max(scale, std::abs(at(hb, i)));
    }
    EXPECT_GT(scale, 0.0);
    return diff / scale;
  }

  // Every product with these group sizes: rhs [G, N, k], the window [w0, w0 + n).
  void check(const std::vector<int32_t>& sizes, int64_t k, int64_t N, int64_t w0, int64_t n) {
    const int64_t G = int64_t(sizes.size());
    const int64_t m = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
    Tensor host_sizes = Tensor::empty({G}, DType::I32);
    std::copy(sizes.begin(), sizes.end(), host_sizes.data<int32_t>());
    const Tensor group_sizes = be->to_device(host_sizes, MemKind::Workspace);
    const Tensor lhs = random({m, k}, DType::BF16, 1.0), w = random({G, N, k}, DType::BF16, 0.1);
    const Tensor dout = random({m, n}, DType::BF16, 1.0);
    const GmmRows window{.weight_begin = w0, .weight_rows = n};
    cutlass_gmm::GroupedGemm cutlass(cuda::compute_stream(*be));
    cutlass_gmm::Problem p{.group_sizes = static_cast<const int32_t*>(group_sizes.raw()),
                           .G = G,
                           .m = m,
                           .k = k,
                           .N = N,
                           .w0 = w0,
                           .n = n};
    for (const bool accumulate : {false, true}) {
      SCOPED_TRACE(accumulate ? "accumulating" : "writing");
      GmmRows rows = window;
      rows.accumulate = accumulate;
      p.accumulate = accumulate;
      {
        SCOPED_TRACE("forward");
        const Tensor start = random({m, n}, DType::BF16, 1.0);
        Tensor own = be->alloc({m, n}, DType::BF16, MemKind::Workspace);
        Tensor lib = be->alloc({m, n}, DType::BF16, MemKind::Workspace);
        be->copy({.dst = own, .src = start});
        be->copy({.dst = lib, .src = start});
        be->gmm({.out = own, .lhs = lhs, .rhs = w, .group_sizes = group_sizes, .rows = rows});
        p.product = GroupedProduct::kForward;
        p.x = lhs.raw(), p.y = w.raw(), p.out = lib.raw();
        cutlass.run(p);
        cutlass.check();
        EXPECT_LT(relative_error(lib, own), 8e-3);
      }
      {
        SCOPED_TRACE("dlhs");
        const Tensor start = random({m, k}, DType::BF16, 1.0);
        Tensor own = be->alloc({m, k}, DType::BF16, MemKind::Workspace);
        Tensor lib = be->alloc({m, k}, DType::BF16, MemKind::Workspace);
        be->copy({.dst = own, .src = start});
        be->copy({.dst = lib, .src = start});
        be->gmm_dlhs(
            {.dlhs = own, .dout = dout, .rhs = w, .group_sizes = group_sizes, .rows = rows});
        p.product = GroupedProduct::kDlhs;
        p.x = dout.raw(), p.y = w.raw(), p.out = lib.raw();
        cutlass.run(p);
        cutlass.check();
        EXPECT_LT(relative_error(lib, own), 8e-3);
      }
    }
    {
      SCOPED_TRACE("drhs");
      // drhs always adds: empty groups' windows and rows outside the window stay as they were.
      const Tensor start = random({G, N, k}, DType::F32, 1.0);
      Tensor own = be->alloc({G, N, k}, DType::F32, MemKind::Workspace);
      Tensor lib = be->alloc({G, N, k}, DType::F32, MemKind::Workspace);
      be->copy({.dst = own, .src = start});
      be->copy({.dst = lib, .src = start});
      be->gmm_drhs(
          {.drhs = own, .lhs = lhs, .dout = dout, .group_sizes = group_sizes, .rows = window});
      p.product = GroupedProduct::kDrhs;
      p.x = dout.raw(), p.y = lhs.raw(), p.out = lib.raw();
      cutlass.run(p);
      cutlass.check();
      EXPECT_LT(relative_error(lib, own), 1e-4);
    }
  }

  std::unique_ptr<Backend> be;
  Rng rng{7};
};

TEST_P(GmmCutlass, MatchesTheMmaKernelWithOddAndEmptyGroupsAndWindows) {
  check({0, 37, 1, 0, 200, 129, 0}, 136, 88, 8, 72);
}

TEST_P(GmmCutlass, MatchesTheMmaKernelOnWholeWeightsAndManySmallGroups) {
  std::vector<int32_t> sizes(130);
  for (size_t g = 0; g < sizes.size(); ++g) sizes[g] = int32_t((g * 7) % 6);
  check(sizes, 64, 48, 0, 48);
}

INSTANTIATE_TEST_SUITE_P(Paths, GmmCutlass, ::testing::Values("gpu"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace gemmax
