// The grouped matmul's sm90 forward (cuda_gmm=sm90: TMA, mbarrier, wgmma) against the reference
// backend and against the mma.sync kernel (cuda_gmm=mma): odd shapes (k and n not multiples of
// the tiles), empty groups, row maps on both sides, weight windows, accumulation, many groups.
// On the cuda emulator (/emulated) both kernels sum each product in k order, so they agree bit
// for bit; on a GPU (/gpu, skipped without one; bench/gpu_check.sh runs it) to rounding.
#include <gtest/gtest.h>

#include <numeric>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/backend/cuda/cuda_factory.h"
#include "gemmax/backend/cuda/emu/emulated_backend.h"
#include "gemmax/backend/cuda/ops/gmm_ops.h"
#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/base/convert.h"
#include "gemmax/base/rng.h"
#include "gemmax/config/train_config.h"
#include "gemmax/train/memory_budget.h"
#include "test_util.h"

namespace gemmax {
namespace {

std::unique_ptr<Backend> emulated(const char* gmm) {
  BackendOptions o;
  o.name = "cuda_emulated";
  o.cuda_gmm = gmm;
  return make_backend(o);
}

class GmmSm90 : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    gpu = std::string(GetParam()) == "gpu";
    std::string why;
    if (gpu && !cuda::cuda_device_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
    BackendOptions o;
    o.name = gpu ? "cuda" : "cuda_emulated";
    o.cuda_sync_check = gpu;
    o.cuda_gmm = "sm90";
    sm90 = make_backend(o);
    o.cuda_gmm = "mma";
    mma = make_backend(o);
  }
  // Bit for bit on the emulator, to rounding on the GPU.
  void expect_same(const std::string& what, const Tensor& got, const Tensor& want) {
    if (gpu)
      expect_close(what, got, want);
    else
      expect_equal(what, got, want);
  }

  Tensor rand(const Shape& s) {
    Tensor t = Tensor::empty(s, DType::BF16);
    for (int64_t i = 0; i < t.numel(); ++i) set_from_double(t, i, rng.normal());
    return t;
  }
  static Tensor ints(const std::vector<int32_t>& v) {
    Tensor t = Tensor::empty({int64_t(v.size())}, DType::I32);
    std::copy(v.begin(), v.end(), t.data<int32_t>());
    return t;
  }
  static Tensor clone(const Tensor& t) {
    Tensor c = Tensor::empty(t.shape(), t.dtype());
    std::memcpy(c.raw(), t.raw(), t.nbytes());
    return c;
  }
  // out after be.gmm on copies of the operands (device copies for the emulated backends).
  static Tensor gmm(Backend& be, const Tensor& out, const Tensor& lhs, const Tensor& rhs,
                    const Tensor& sizes, GmmRows rows, const Tensor& in, const Tensor& out_map) {
    auto dev = [&](const Tensor& t) {
      return !t.defined()               ? t
             : be.name() == "reference" ? clone(t)
                                        : be.to_device(t, MemKind::Workspace);
    };
    const Tensor o = dev(out);
    rows.in = dev(in);
    rows.out = dev(out_map);
    be.gmm({.out = o, .lhs = dev(lhs), .rhs = dev(rhs), .group_sizes = dev(sizes), .rows = rows});
    return clone(be.to_host(o));
  }
  static void expect_close(const std::string& what, const Tensor& got, const Tensor& want) {
    ASSERT_EQ(got.numel(), want.numel());
    double scale = 0;
    for (int64_t i = 0; i < want.numel(); ++i)
      scale = std::max(scale, std::abs(get_as_double(want, i)));
    int bad = 0;
    for (int64_t i = 0; i < want.numel() && bad < 5; ++i) {
      const double g = get_as_double(got, i), w = get_as_double(want, i);
      if (!(std::abs(g - w) <= (std::abs(w) + scale) / 128)) {
        ++bad;
        ADD_FAILURE() << what << "[" << i << "]: got " << g << ", reference " << w;
      }
    }
  }
  static void expect_equal(const std::string& what, const Tensor& got, const Tensor& want) {
    ASSERT_EQ(got.numel(), want.numel());
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_EQ(get_as_double(got, i), get_as_double(want, i)) << what << "[" << i << "]";
  }

  bool gpu = false;
  Rng rng{23};
  ReferenceBackend ref;
  std::unique_ptr<Backend> sm90, mma;
};

// Rows gathered from tokens and scattered through a permutation, the up half of a fused
// gate/up weight as the window (n = 136: a full and a partial tile of 128 columns), k = 72 (a
// full and a partial slice of 64), groups empty at the start, in the middle and at the end, one
// group over three row tiles of 64.
TEST_P(GmmSm90, MatchesTheReferenceAndTheMmaKernelWithMapsWindowsAndEmptyGroups) {
  const std::vector<int32_t> sizes = {0, 150, 1, 0, 9, 0};
  const int64_t G = int64_t(sizes.size()), m = 160, k = 72, F = 136, N = 2 * F, T = 97;
  std::vector<int32_t> token(m), perm(m);
  for (int64_t r = 0; r < m; ++r) token[r] = int32_t(rng.uniform_int(T));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t r = m - 1; r > 0; --r) std::swap(perm[r], perm[rng.uniform_int(r + 1)]);
  const Tensor lhs = rand({T, k}), rhs = rand({G, N, k}), out = rand({m, F});
  for (bool up : {false, true})
    for (bool acc : {false, true}) {
      GmmRows rows;
      rows.weight_begin = up ? F : 0;
      rows.weight_rows = F;
      rows.accumulate = acc;
      const std::string what = std::string(up ? "up" : "gate") + (acc ? " accumulate" : "");
      const Tensor s = ints(sizes), in = ints(token), o = ints(perm);
      const Tensor want = gmm(ref, out, lhs, rhs, s, rows, in, o);
      const Tensor got = gmm(*sm90, out, lhs, rhs, s, rows, in, o);
      expect_close("sm90 vs reference, " + what, got, want);
      expect_same("sm90 vs mma, " + what, got, gmm(*mma, out, lhs, rhs, s, rows, in, o));
    }
}

// Many groups, most of them empty, each with a few rows: the group table in tiles of 64 rows.
TEST_P(GmmSm90, ManySmallGroupsWithoutMaps) {
  const int64_t G = 130, k = 16, N = 24;
  std::vector<int32_t> sizes(G, 0);
  for (int64_t g = 0; g < G; g += 3) sizes[g] = int32_t(g % 4 + (g % 31 == 0 ? 70 : 0));
  const int64_t m = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  const Tensor lhs = rand({m, k}), rhs = rand({G, N, k}), out = rand({m, N}), s = ints(sizes);
  const Tensor got = gmm(*sm90, out, lhs, rhs, s, {}, {}, {});
  expect_close("sm90 vs reference", got, gmm(ref, out, lhs, rhs, s, {}, {}, {}));
  expect_same("sm90 vs mma", got, gmm(*mma, out, lhs, rhs, s, {}, {}, {}));
}

// A reduction of six slices through the four stages: every stage reused, barrier phases of both
// parities, the last slice partial (k = 328).
TEST_P(GmmSm90, ALongReductionGoesRoundThePipeline) {
  const std::vector<int32_t> sizes = {70, 0, 5};
  const int64_t G = 3, m = 75, k = 328, N = 24;
  const Tensor lhs = rand({m, k}), rhs = rand({G, N, k}), out = rand({m, N}), s = ints(sizes);
  const Tensor got = gmm(*sm90, out, lhs, rhs, s, {}, {}, {});
  expect_close("sm90 vs reference", got, gmm(ref, out, lhs, rhs, s, {}, {}, {}));
  expect_same("sm90 vs mma", got, gmm(*mma, out, lhs, rhs, s, {}, {}, {}));
}

INSTANTIATE_TEST_SUITE_P(Paths, GmmSm90, ::testing::Values("emulated", "gpu"),
                         [](const auto& info) { return std::string(info.param); });

// The kernel itself runs (no silent fallback to mma.sync), and group sizes that do not add up
// are reported by it.
TEST(GmmSm90Emulated, TheSm90KernelRunsAndReportsBadGroupSizes) {
  Rng rng(3);
  auto rand = [&](const Shape& s) {
    Tensor t = Tensor::empty(s, DType::BF16);
    for (int64_t i = 0; i < t.numel(); ++i) set_from_double(t, i, rng.normal());
    return t;
  };
  auto ints = [](const std::vector<int32_t>& v) {
    Tensor t = Tensor::empty({int64_t(v.size())}, DType::I32);
    std::copy(v.begin(), v.end(), t.data<int32_t>());
    return t;
  };
  const std::unique_ptr<Backend> sm90 = emulated("sm90"), mma = emulated("mma");
  auto& be = dynamic_cast<cuda::EmulatedBackend&>(*sm90);
  EXPECT_NE(be.describe().find("sm90"), std::string::npos) << be.describe();
  const Tensor lhs = be.to_device(rand({6, 8}), MemKind::Workspace);
  const Tensor rhs = be.to_device(rand({2, 8, 8}), MemKind::Workspace);
  const Tensor sizes = be.to_device(ints({2, 3}), MemKind::Workspace);
  Tensor out = be.alloc({6, 8}, DType::BF16, MemKind::Workspace);
  const kern::GmmArgs a = cuda::ops::gmm_args(kAllRows, sizes, 6, 8, 8, 6, 6,
                                              be.platform().errors(), kern::kOpGmm, "gmm");
  EXPECT_TRUE(cuda::ops::gmm_sm90<gemmax::bf16>(be.platform(), out, lhs, rhs, a));
  testing::expect_error([&] { be.to_host(out); }, {"gmm", "sum to 5", "6 rows"});
  // Float32 runs and cuda_gmm=mma do not take it.
  auto& off = dynamic_cast<cuda::EmulatedBackend&>(*mma);
  EXPECT_FALSE(cuda::ops::gmm_sm90<gemmax::bf16>(off.platform(), out, lhs, rhs, a));
  EXPECT_FALSE(cuda::ops::gmm_sm90<float>(be.platform(), out, lhs, rhs, a));
}

TEST(GmmSm90Emulated, UnknownCudaGmmIsAnError) {
  TrainConfig c;
  c.backend.backend = "cuda_emulated";
  c.backend.cuda_kernels = "fast";
  c.backend.cuda_gmm = "wgmma";
  testing::expect_error([&] { backend_options(c); }, {"cuda_gmm='wgmma'", "mma or sm90"});
  c.backend.cuda_gmm = "sm90";
  EXPECT_EQ(backend_options(c).cuda_gmm, "sm90");
}

}  // namespace
}  // namespace gemmax
