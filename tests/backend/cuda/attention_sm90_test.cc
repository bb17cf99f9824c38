// The sm90 attention forward (cuda_attention=sm90: TMA, mbarrier, warp-specialised wgmma with P
// in registers) against the reference backend (fp64) and against the mma.sync kernel
// (cuda_attention=mma): head_dim 256 and 512, sequences that are not a multiple of the key tile,
// GQA groups of 1, 2 and 4, sliding windows (key tiles skipped), segments, round_scores, the
// log-sum-exp. The two kernels sum scores in different orders (the mma kernel in two 128-wide
// halves, wgmma straight through), so they agree to rounding, not bit for bit.
// /emulated runs on the cuda emulator; /gpu on a GPU (skipped without one).
#include <gtest/gtest.h>

#include <cmath>

#include "gemmax/backend/cuda/emu/emulated_backend.h"
#include "gemmax/backend/cuda/ops/attention_ops.h"
#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/base/rng.h"
#include "gemmax/config/train_config.h"
#include "gemmax/model/gemma4.h"
#include "gemmax/train/memory_budget.h"
#include "cuda_paths.h"
#include "test_util.h"

namespace gemmax {
namespace {

struct Case {
  int64_t B, S, H, KV, hd, window;
  bool segments, round_scores;
  double score_sd = 1;  // 8 where round_scores is on: bfloat16's steps of 1/16 then matter
};

struct Result {
  Tensor o, lse;
};

using testing::expect_close_bf16;

// The log-sum-exp within 2e-3 (one key more or less among a few dozen moves it ~1e-2).
void expect_lse(const std::string& what, const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.numel(), want.numel());
  int bad = 0;
  for (int64_t i = 0; i < want.numel() && bad < 5; ++i) {
    const double g = get_as_double(got, i), w = get_as_double(want, i);
    if (!(std::abs(g - w) <= 2e-3 * (1 + std::abs(w)))) {
      ++bad;
      ADD_FAILURE() << what << "[" << i << "]: got " << g << ", want " << w;
    }
  }
}

class AttentionSm90 : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    gpu = std::string(GetParam()) == "gpu";
    if (const std::string why = testing::no_gpu(gpu); !why.empty()) GTEST_SKIP() << why;
    sm90 = testing::cuda_backend(gpu, &BackendOptions::cuda_attention, "sm90");
    mma = testing::cuda_backend(gpu, &BackendOptions::cuda_attention, "mma");
  }

  Tensor rand(const Shape& s, double sd) { return testing::random_tensor(s, rng, sd, DType::BF16); }
  static Result forward(Backend& be, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& seg, const AttentionShape& s) {
    using testing::copy_for;
    const Tensor o = be.alloc(q.shape(), DType::BF16, MemKind::Workspace);
    const Tensor lse = be.alloc({s.batch, s.num_heads, s.seq}, DType::F32, MemKind::Workspace);
    be.attention_forward({.o = o,
                          .lse = lse,
                          .q = copy_for(be, q),
                          .k = copy_for(be, k),
                          .v = copy_for(be, v),
                          .segment_ids = copy_for(be, seg),
                          .shape = s});
    return {testing::host_result(be, o), testing::host_result(be, lse)};
  }

  // Scores ~ N(0, score_sd^2): q and k with entries of variance 1 / sqrt(hd), q scaled.
  void check(const Case& c) {
    const std::string name = "hd " + std::to_string(c.hd) + " S " + std::to_string(c.S) + " H " +
                             std::to_string(c.H) + "/" + std::to_string(c.KV) + " window " +
                             std::to_string(c.window) + (c.round_scores ? " rounded" : "");
    const int64_t T = c.B * c.S;
    const double sd = std::pow(double(c.hd), -0.25);
    const Tensor q = rand({T, c.H, c.hd}, sd * c.score_sd), k = rand({T, c.KV, c.hd}, sd),
                 v = rand({T, c.KV, c.hd}, 1.0);
    Tensor seg = Tensor::empty({T}, DType::I32);
    for (int64_t t = 0; t < T; ++t)  // two documents per sequence, the split not on a tile edge
      seg.data<int32_t>()[t] = c.segments && t % c.S >= c.S / 3 + 5 ? 2 : 1;
    const AttentionShape s{c.B, c.S, c.H, c.KV, c.hd, c.window, c.round_scores};
    const Result got = forward(*sm90, q, k, v, seg, s);
    const Result ref = forward(reference, q, k, v, seg, s);
    const Result old = forward(*mma, q, k, v, seg, s);
    expect_close_bf16("o vs reference, " + name, got.o, ref.o);
    expect_lse("lse vs reference, " + name, got.lse, ref.lse);
    expect_close_bf16("o vs mma, " + name, got.o, old.o);
    expect_lse("lse vs mma, " + name, got.lse, old.lse);
  }

  bool gpu = false;
  Rng rng{22};
  ReferenceBackend reference;
  std::unique_ptr<Backend> sm90, mma;
};

// head_dim 256 (two warpgroups of 64 rows, key tiles of 64): two sequences of 77 (a partial
// last tile) with two documents each, GQA groups 2 and 4; a group of 1 over 150 positions
// with and without a window of 40 (the later blocks skip the first key tile; without the
// window the middle block's first tile is interior), round_scores.
TEST_P(AttentionSm90, HeadDim256MatchesTheReferenceAndTheMmaKernel) {
  check({.B = 2, .S = 77, .H = 4, .KV = 2, .hd = 256, .window = 0, .segments = true,
         .round_scores = false});
  check({.B = 1, .S = 45, .H = 8, .KV = 2, .hd = 256, .window = 0, .segments = true,
         .round_scores = true, .score_sd = 8});
  check({.B = 1, .S = 150, .H = 1, .KV = 1, .hd = 256, .window = 40, .segments = false,
         .round_scores = false});
  check({.B = 1, .S = 150, .H = 1, .KV = 1, .hd = 256, .window = 0, .segments = false,
         .round_scores = true, .score_sd = 8});
}

// head_dim 512 (two warpgroups over the same 64 rows, 256 output columns each): groups of 4
// and 1, segments, a window, round_scores, a partial last tile.
TEST_P(AttentionSm90, HeadDim512MatchesTheReferenceAndTheMmaKernel) {
  check({.B = 1, .S = 70, .H = 4, .KV = 1, .hd = 512, .window = 0, .segments = true,
         .round_scores = false});
  check({.B = 2, .S = 100, .H = 2, .KV = 2, .hd = 512, .window = 30, .segments = false,
         .round_scores = true, .score_sd = 8});
}

INSTANTIATE_TEST_SUITE_P(Paths, AttentionSm90, ::testing::Values("emulated", "gpu"),
                         [](const auto& info) { return std::string(info.param); });

// The kernel itself runs for head_dim 256 and 512 (no silent fallback); head_dim 128 and
// cuda_attention=mma do not take it.
TEST(AttentionSm90Emulated, TheSm90KernelRunsWhereItApplies) {
  const std::unique_ptr<Backend> be =
      testing::cuda_backend(false, &BackendOptions::cuda_attention, "sm90");
  auto& emu = dynamic_cast<cuda::EmulatedBackend&>(*be);
  EXPECT_NE(emu.describe().find("sm90"), std::string::npos) << emu.describe();
  for (const int64_t hd : {128, 256, 512}) {
    const kern::AttnDims d{1, 8, 2, 1, hd, 0, false};
    const Tensor q = be->zeros({8, 2, hd}, DType::BF16, MemKind::Workspace);
    const Tensor k = be->zeros({8, 1, hd}, DType::BF16, MemKind::Workspace);
    const Tensor o = be->alloc({8, 2, hd}, DType::BF16, MemKind::Workspace);
    const Tensor lse = be->alloc({1, 2, 8}, DType::F32, MemKind::Workspace);
    const Tensor seg = be->zeros({8}, DType::I32, MemKind::Workspace);
    EXPECT_EQ(cuda::ops::attention_forward_sm90(emu.platform(), o, lse, q, k, k, seg, d), hd != 128)
        << hd;
    if (hd == 128) continue;
    // Zero scores: o = the mean of the (zero) values, lse = log(number of visible keys).
    const Tensor h = be->to_host(lse);
    for (int64_t i = 0; i < 8; ++i) EXPECT_NEAR(h.data<float>()[i], std::log(double(i + 1)), 1e-5);
  }
}

// A whole bfloat16 forward and backward of a small model with a sliding layer (head_dim 256)
// and a global one (head_dim 512): cuda_attention=sm90 runs the new forward (and the sm90
// backward, on the o and lse it wrote; noting no fallback the mma path does not) and gives
// the loss and gradients of mma.
TEST(AttentionSm90Emulated, ModelLossAndGradientsMatchTheMmaPath) {
  ModelConfig cfg = testing::tensor_core_test_config(true);
  cfg.global_num_kv_heads = 1;
  const Batch batch = testing::make_batch(2, 16, cfg.vocab_size, 5, 9);
  const testing::PathSteps steps =
      testing::step_per_path(cfg, batch, &BackendOptions::cuda_attention, {"mma", "sm90"});
  testing::expect_same_step_on_both_paths(steps);
  const std::vector<Tensor>& grads = steps.grads;
  expect_close_bf16("gradients, sm90 vs mma", grads[1], grads[0]);
}

TEST(AttentionSm90Emulated, UnknownCudaAttentionIsAnError) {
  auto options = [](const char* attention) {
    return backend_options(train_config_from(Config::defaults({"backend=cuda_emulated", attention})));
  };
  testing::expect_error([&] { options("cuda_attention=x"); }, {"cuda_attention='x'", "mma, sm90 or cudnn"});
  EXPECT_EQ(options("cuda_attention=sm90").cuda_attention, CudaAttention::kSm90);
}

}  // namespace
}  // namespace gemmax
