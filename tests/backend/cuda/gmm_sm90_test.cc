// The grouped matmul's sm90 kernels (cuda_gmm=sm90: TMA, mbarrier, wgmma), forward, dlhs and
// drhs, against the reference backend and against the mma.sync kernels (cuda_gmm=mma): odd
// shapes (partial tiles in every dimension), empty groups, row maps on both sides, weight
// windows, accumulation, many groups, reductions that go round the pipeline.
// On the cuda emulator (/emulated) both paths sum each product in reduction order (the same
// slices, zeros past the end), so they agree bit for bit; on a GPU (/gpu, skipped without one;
// bench/gpu_check.sh runs it) to rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <tuple>

#include "gemmax/backend/cuda/emu/emulated_backend.h"
#include "gemmax/backend/cuda/ops/gmm_ops.h"
#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/base/rng.h"
#include "gemmax/config/train_config.h"
#include "gemmax/model/gemma4.h"
#include "gemmax/train/memory_budget.h"
#include "cuda_paths.h"
#include "test_util.h"

namespace gemmax {
namespace {

using testing::copy_for;
using testing::expect_close_bf16;

Tensor ints(const std::vector<int32_t>& v) { return conformance::Harness::ints(v); }

// 130 groups, most of them empty, each with a few rows (every 31st with 70 more).
std::vector<int32_t> many_small_groups() {
  std::vector<int32_t> sizes(130, 0);
  for (int64_t g = 0; g < 130; g += 3) sizes[g] = int32_t(g % 4 + (g % 31 == 0 ? 70 : 0));
  return sizes;
}

std::unique_ptr<Backend> emulated(const char* gmm) {
  return testing::cuda_backend(false, &BackendOptions::cuda_gmm, gmm);
}

class GmmSm90 : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    gpu = std::string(GetParam()) == "gpu";
    if (const std::string why = testing::no_gpu(gpu); !why.empty()) GTEST_SKIP() << why;
    sm90 = testing::cuda_backend(gpu, &BackendOptions::cuda_gmm, "sm90");
    mma = testing::cuda_backend(gpu, &BackendOptions::cuda_gmm, "mma");
  }
  // Bit for bit on the emulator, to rounding on the GPU.
  void expect_same(const std::string& what, const Tensor& got, const Tensor& want) {
    if (gpu)
      expect_close_bf16(what, got, want);
    else
      expect_equal(what, got, want);
  }

  Tensor rand(const Shape& s, DType dtype = DType::BF16) {
    return testing::random_tensor(s, rng, 1.0, dtype);
  }
  // `out` after call(out's copy, rows with the maps' copies) on be; the operands' copies are the
  // call's to make (copy_for).
  template <class Call>
  static Tensor after(Backend& be, const Tensor& out, GmmRows rows, const Tensor& in,
                      const Tensor& out_map, Call&& call) {
    const Tensor o = copy_for(be, out);
    rows.in = copy_for(be, in);
    rows.out = copy_for(be, out_map);
    call(o, rows);
    return testing::host_result(be, o);
  }
  static Tensor gmm(Backend& be, const Tensor& out, const Tensor& lhs, const Tensor& rhs,
                    const Tensor& sizes, GmmRows rows, const Tensor& in, const Tensor& out_map) {
    return after(be, out, rows, in, out_map, [&](const Tensor& o, const GmmRows& r) {
      be.gmm({.out = o, .lhs = copy_for(be, lhs), .rhs = copy_for(be, rhs),
              .group_sizes = copy_for(be, sizes), .rows = r});
    });
  }
  static Tensor dlhs(Backend& be, const Tensor& dlhs, const Tensor& dout, const Tensor& rhs,
                     const Tensor& sizes, GmmRows rows, const Tensor& in, const Tensor& out_map) {
    return after(be, dlhs, rows, in, out_map, [&](const Tensor& d, const GmmRows& r) {
      be.gmm_dlhs({.dlhs = d, .dout = copy_for(be, dout), .rhs = copy_for(be, rhs),
                   .group_sizes = copy_for(be, sizes), .rows = r});
    });
  }
  static Tensor drhs(Backend& be, const Tensor& drhs, const Tensor& lhs, const Tensor& dout,
                     const Tensor& sizes, GmmRows rows, const Tensor& in, const Tensor& out_map) {
    return after(be, drhs, rows, in, out_map, [&](const Tensor& d, const GmmRows& r) {
      be.gmm_drhs({.drhs = d, .lhs = copy_for(be, lhs), .dout = copy_for(be, dout),
                   .group_sizes = copy_for(be, sizes), .rows = r});
    });
  }
  static void expect_equal(const std::string& what, const Tensor& got, const Tensor& want) {
    ASSERT_EQ(got.numel(), want.numel());
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_EQ(get_as_double(got, i), get_as_double(want, i)) << what << "[" << i << "]";
  }

  // The forward, then dlhs and drhs, without maps or windows, groups of `sizes` rows: sm90
  // against the reference and mma.
  void check_forward(const std::vector<int32_t>& sizes, int64_t k, int64_t N) {
    const int64_t G = int64_t(sizes.size()), m = rows_of(sizes);
    const Tensor lhs = rand({m, k}), rhs = rand({G, N, k}), out = rand({m, N});
    const Tensor s = ints(sizes);
    const Tensor got = gmm(*sm90, out, lhs, rhs, s, {}, {}, {});
    expect_close_bf16("sm90 vs reference", got, gmm(ref, out, lhs, rhs, s, {}, {}, {}));
    expect_same("sm90 vs mma", got, gmm(*mma, out, lhs, rhs, s, {}, {}, {}));
  }
  void check_backward(const std::vector<int32_t>& sizes, int64_t k, int64_t N) {
    const int64_t G = int64_t(sizes.size()), m = rows_of(sizes);
    const Tensor x = rand({m, k}), rhs = rand({G, N, k}), dout = rand({m, N});
    const Tensor s = ints(sizes);
    const Tensor dx = rand({m, k}), dw = rand({G, N, k}, DType::F32);
    const Tensor got = dlhs(*sm90, dx, dout, rhs, s, {}, {}, {});
    expect_close_bf16("sm90 dlhs vs reference", got, dlhs(ref, dx, dout, rhs, s, {}, {}, {}));
    expect_same("sm90 dlhs vs mma", got, dlhs(*mma, dx, dout, rhs, s, {}, {}, {}));
    const Tensor gw = drhs(*sm90, dw, x, dout, s, {}, {}, {});
    expect_close_bf16("sm90 drhs vs reference", gw, drhs(ref, dw, x, dout, s, {}, {}, {}));
    expect_same("sm90 drhs vs mma", gw, drhs(*mma, dw, x, dout, s, {}, {}, {}));
  }
  static int64_t rows_of(const std::vector<int32_t>& sizes) {
    return std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  }

  std::vector<int32_t> permutation(int64_t m) {
    std::vector<int32_t> perm(m);
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t r = m - 1; r > 0; --r) std::swap(perm[r], perm[rng.uniform_int(r + 1)]);
    return perm;
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
  std::vector<int32_t> token(m);
  for (int64_t r = 0; r < m; ++r) token[r] = int32_t(rng.uniform_int(T));
  const std::vector<int32_t> perm = permutation(m);
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
      expect_close_bf16("sm90 vs reference, " + what, got, want);
      expect_same("sm90 vs mma, " + what, got, gmm(*mma, out, lhs, rhs, s, rows, in, o));
    }
}

// Many groups, most of them empty, each with a few rows: the group table in tiles of 64 rows.
TEST_P(GmmSm90, ManySmallGroupsWithoutMaps) { check_forward(many_small_groups(), 16, 24); }

// A reduction of six slices through the four stages: every stage reused, barrier phases of both
// parities, the last slice partial (k = 328).
TEST_P(GmmSm90, ALongReductionGoesRoundThePipeline) { check_forward({70, 0, 5}, 328, 24); }

// gmm_dlhs: the output's k = 136 (a full and a partial tile of 128 columns), the reduction over
// a window of n = 72 (a full and a partial slice of 64) of either half of a fused gate/up weight,
// the same groups as above; dout read by TMA (no maps) or gathered through a permutation, dlhs
// scattered through another; with and without accumulation.
TEST_P(GmmSm90, DlhsMatchesTheReferenceAndTheMmaKernelWithMapsWindowsAndEmptyGroups) {
  const std::vector<int32_t> sizes = {0, 150, 1, 0, 9, 0};
  const int64_t G = int64_t(sizes.size()), m = 160, k = 136, F = 72, N = 2 * F;
  const Tensor dout = rand({m, F}), rhs = rand({G, N, k}), dx = rand({m, k});
  for (const auto& [maps, up, acc] : {std::tuple{false, false, false}, {false, true, true},
                                      {true, false, true}, {true, true, false}}) {
    GmmRows rows;
    rows.weight_begin = up ? F : 0;
    rows.weight_rows = F;
    rows.accumulate = acc;
    const std::string what = std::string(maps ? "maps, " : "") + (up ? "up" : "gate") +
                             (acc ? " accumulate" : "");
    const Tensor s = ints(sizes), in = maps ? ints(permutation(m)) : Tensor(),
                 o = maps ? ints(permutation(m)) : Tensor();
    const Tensor want = dlhs(ref, dx, dout, rhs, s, rows, in, o);
    const Tensor got = dlhs(*sm90, dx, dout, rhs, s, rows, in, o);
    expect_close_bf16("sm90 dlhs vs reference, " + what, got, want);
    expect_same("sm90 dlhs vs mma, " + what, got, dlhs(*mma, dx, dout, rhs, s, rows, in, o));
  }
}

// The weight rows past the window, which the last slice's TMA box brings in, never reach the
// sum: the other half of the fused weight is infinite.
TEST_P(GmmSm90, DlhsReadsNothingPastTheWeightWindow) {
  const std::vector<int32_t> sizes = {40, 30};
  const int64_t G = 2, m = 70, k = 64, F = 40, N = 2 * F;
  Tensor rhs = rand({G, N, k});
  for (int64_t g = 0; g < G; ++g)
    for (int64_t i = F * k; i < N * k; ++i) set_from_double(rhs, g * N * k + i, INFINITY);
  const Tensor dout = rand({m, F}), dx = rand({m, k}), s = ints(sizes);
  GmmRows rows;
  rows.weight_rows = F;
  const Tensor got = dlhs(*sm90, dx, dout, rhs, s, rows, {}, {});
  expect_close_bf16("sm90 dlhs vs reference", got, dlhs(ref, dx, dout, rhs, s, rows, {}, {}));
  expect_same("sm90 dlhs vs mma", got, dlhs(*mma, dx, dout, rhs, s, rows, {}, {}));
}

// gmm_drhs: the reduction over each group's rows (150: two full slices and a partial one; 1; 9)
// with the row maps of the model's uses (none: both operands by TMA; lhs gathered from tokens,
// dout contiguous; lhs contiguous, dout gathered through a permutation; both gathered), k = 136
// and n = 72 (a full and a partial tile each way), either half of a fused weight, float32 and
// bfloat16 gradients, accumulated into what is there.
TEST_P(GmmSm90, DrhsMatchesTheReferenceAndTheMmaKernelWithMapsWindowsAndEmptyGroups) {
  const std::vector<int32_t> sizes = {0, 150, 1, 0, 9, 0};
  const int64_t G = int64_t(sizes.size()), m = 160, k = 136, F = 72, N = 2 * F, T = 97;
  std::vector<int32_t> token(m);
  for (int64_t r = 0; r < m; ++r) token[r] = int32_t(rng.uniform_int(T));
  const Tensor tokens = rand({T, k}), lhs = rand({m, k}), dout = rand({m, F});
  for (const auto& [in_map, out_map, up, dtype] :
       {std::tuple{false, false, false, DType::F32}, {true, false, true, DType::BF16},
        {false, true, false, DType::BF16}, {true, true, true, DType::F32}}) {
    GmmRows rows;
    rows.weight_begin = up ? F : 0;
    rows.weight_rows = F;
    const std::string what = std::string(in_map ? "in map, " : "") +
                             (out_map ? "out map, " : "") + (up ? "up, " : "gate, ") +
                             std::string(dtype_name(dtype));
    const Tensor s = ints(sizes), in = in_map ? ints(token) : Tensor(),
                 o = out_map ? ints(permutation(m)) : Tensor(), dw = rand({G, N, k}, dtype);
    const Tensor& x = in_map ? tokens : lhs;
    const Tensor want = drhs(ref, dw, x, dout, s, rows, in, o);
    const Tensor got = drhs(*sm90, dw, x, dout, s, rows, in, o);
    expect_close_bf16("sm90 drhs vs reference, " + what, got, want);
    expect_same("sm90 drhs vs mma, " + what, got, drhs(*mma, dw, x, dout, s, rows, in, o));
  }
}

// Many groups, most of them empty, each with a few rows, for both backward products.
TEST_P(GmmSm90, BackwardWithManySmallGroups) { check_backward(many_small_groups(), 16, 24); }

// Reductions of six slices through the four stages (every stage reused, barrier phases of both
// parities, the last slice partial): dlhs over n = 328 weight rows, drhs over a group of 330
// rows.
TEST_P(GmmSm90, BackwardLongReductionsGoRoundThePipeline) {
  check_backward({5, 330, 0}, 24, 328);
}

INSTANTIATE_TEST_SUITE_P(Paths, GmmSm90, ::testing::Values("emulated", "gpu"),
                         [](const auto& info) { return std::string(info.param); });

// The kernel itself runs (no silent fallback to mma.sync), and group sizes that do not add up
// are reported by it.
TEST(GmmSm90Emulated, TheSm90KernelRunsAndReportsBadGroupSizes) {
  Rng rng(3);
  auto rand = [&](const Shape& s) { return testing::random_tensor(s, rng, 1.0, DType::BF16); };
  const std::unique_ptr<Backend> sm90 = emulated("sm90"), mma = emulated("mma");
  auto& be = dynamic_cast<cuda::EmulatedBackend&>(*sm90);
  EXPECT_NE(be.describe().find("sm90"), std::string::npos) << be.describe();
  const Tensor lhs = be.to_device(rand({6, 8}), MemKind::Workspace);
  const Tensor rhs = be.to_device(rand({2, 8, 8}), MemKind::Workspace);
  const Tensor sizes = be.to_device(ints({2, 3}), MemKind::Workspace);
  Tensor out = be.alloc({6, 8}, DType::BF16, MemKind::Workspace);
  const GmmDims d{.m = 6, .k = 8, .G = 2, .N = 8, .n = 8, .in_rows = 6, .out_rows = 6};
  const kern::GmmArgs a =
      cuda::ops::gmm_args(kAllRows, sizes, d, be.platform().errors(), kern::kOpGmm, "gmm");
  using cuda::ops::GmmPath;
  const GmmArgs fwd{.out = out, .lhs = lhs, .rhs = rhs, .group_sizes = sizes};
  EXPECT_EQ(cuda::ops::gmm_path(be.platform(), fwd, a), GmmPath::kSm90);
  cuda::ops::gmm_sm90(be.platform(), out, lhs, rhs, a);
  testing::expect_error([&] { be.to_host(out); }, {"gmm", "sum to 5", "6 rows"});
  // The backward products' sm90 kernels, the same way.
  kern::GmmArgs b = a;
  b.op = kern::kOpGmmDlhs;
  const GmmDlhsArgs bwd{.dlhs = out, .dout = lhs, .rhs = rhs, .group_sizes = sizes};
  EXPECT_EQ(cuda::ops::gmm_path(be.platform(), bwd, b), GmmPath::kSm90);
  cuda::ops::gmm_dlhs_sm90(be.platform(), out, lhs, rhs, b);
  testing::expect_error([&] { be.to_host(out); }, {"gmm_dlhs", "sum to 5", "6 rows"});
  Tensor dw = be.alloc({2, 8, 8}, DType::F32, MemKind::Workspace);
  b.op = kern::kOpGmmDrhs;
  const GmmDrhsArgs wgrad{.drhs = dw, .lhs = lhs, .dout = lhs, .group_sizes = sizes};
  EXPECT_EQ(cuda::ops::gmm_path(be.platform(), wgrad, b), GmmPath::kSm90);
  cuda::ops::gmm_drhs_sm90<float>(be.platform(), dw, lhs, lhs, b);
  testing::expect_error([&] { be.to_host(dw); }, {"gmm_drhs", "sum to 5", "6 rows"});
  // Float32 runs and cuda_gmm=mma do not take it.
  auto& off = dynamic_cast<cuda::EmulatedBackend&>(*mma);
  EXPECT_EQ(cuda::ops::gmm_path(off.platform(), fwd, a), GmmPath::kMma);
  EXPECT_FALSE(cuda::ops::kGmmTensorCoreTypes<float>);
  EXPECT_EQ(cuda::ops::gmm_path(off.platform(), bwd, a), GmmPath::kMma);
  EXPECT_EQ(cuda::ops::gmm_path(off.platform(), wgrad, a), GmmPath::kMma);
}

// The whole model's bfloat16 forward and backward with every grouped matmul on the sm90 kernels
// (the model's own row maps, windows and accumulations) equals the mma.sync kernels' bit for bit.
TEST(GmmSm90Emulated, ModelGradientsEqualTheMmaKernelsBitForBit) {
  const ModelConfig cfg = testing::tensor_core_test_config();
  const Batch batch = testing::make_batch(2, 16, cfg.vocab_size, 5, 9);
  const auto [loss, grads, notes] =
      testing::step_per_path(cfg, batch, &BackendOptions::cuda_gmm, {"mma", "sm90"});
  EXPECT_LE(notes[1], notes[0]) << "the sm90 path fell back where mma did not (see stderr)";
  EXPECT_EQ(loss[0], loss[1]);
  ASSERT_EQ(grads[0].numel(), grads[1].numel());
  for (int64_t i = 0; i < grads[0].numel(); ++i)
    ASSERT_EQ(grads[0].data<float>()[i], grads[1].data<float>()[i]) << "gradient " << i;
}

TEST(GmmSm90Emulated, UnknownCudaGmmIsAnError) {
  auto options = [](const char* gmm) {
    return backend_options(train_config_from(Config::defaults({"backend=cuda_emulated", gmm})));
  };
  testing::expect_error([&] { options("cuda_gmm=wgmma"); }, {"cuda_gmm='wgmma'", "mma or sm90"});
  EXPECT_EQ(options("cuda_gmm=sm90").cuda_gmm, CudaGmm::Sm90);
}

}  // namespace
}  // namespace gemmax
