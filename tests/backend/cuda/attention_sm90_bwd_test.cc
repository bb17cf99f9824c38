// The attention backward's sm90 kernels (cuda_attention=sm90: TMA, mbarrier, wgmma; head_dim
// 256 and 512) against the reference backend in fp64 (the conformance criterion: dq, dk, dv within 4
// bfloat16 roundings of the largest true value) and against the mma.sync kernels
// (cuda_attention=mma) on the same inputs: sequences that are not a multiple of the 64-row
// tiles (and, at 512, the ring's 32), GQA groups of 1, 2 and 4, sliding windows, segments,
// round_scores; at head_dim 512 the dk/dv columns split over two blocks. On the cuda
// emulator (/emulated) and on a GPU (/gpu, skipped without one; bench/gpu_check.sh runs it).
// The two kernels sum head_dim in a different order (the mma kernels by 64- or 128-wide parts),
// so their scores, and the bfloat16 probabilities built from them, differ by rounding: the
// comparison with the mma kernels is to two roundings.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "gemmax/backend/cuda/emu/emulated_backend.h"
#include "gemmax/backend/cuda/ops/attention_ops.h"
#include "gemmax/base/convert.h"
#include "gemmax/model/gemma4.h"
#include "gemmax/train/memory_budget.h"
#include "cuda_paths.h"
#include "op_conformance.h"
#include "test_util.h"

namespace gemmax {
namespace {

using conformance::Harness;

std::unique_ptr<Backend> cuda_backend(bool gpu, const char* attention) {
  return testing::cuda_backend(gpu, &BackendOptions::cuda_attention, attention);
}

// Positions split into `docs` documents of nearly equal length, per sequence.
std::vector<int32_t> documents(int64_t B, int64_t S, int docs) {
  std::vector<int32_t> seg;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < S; ++i) seg.push_back(int32_t(1 + i * docs / S));
  return seg;
}

class AttentionSm90Bwd : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    gpu = std::string(GetParam()) == "gpu";
    if (const std::string why = testing::no_gpu(gpu); !why.empty()) GTEST_SKIP() << why;
  }

  // Forward and backward of one shape, each path's own kernels both ways (the forward's o and
  // lse agree to rounding), on sm90 against the fp64 reference and against mma.
  void check(const AttentionShape& s, int docs) {
    const std::string what = conformance::describe_attention(s, docs);
    const DType dt = DType::BF16;
    Harness h(cuda_backend(gpu, "sm90"));
    using conformance::AttentionOperands;
    const AttentionOperands inputs =
        conformance::attention_operands(h, dt, s, documents(s.batch, s.seq, docs), 0.3);
    const conformance::AttentionCalls calls = conformance::attention_calls(s);
    auto [got, truth] = h.run(inputs, calls);
    const std::unique_ptr<Backend> mma = cuda_backend(gpu, "mma");
    AttentionOperands dev = inputs;
    for (Tensor* t : conformance::fields(dev)) *t = mma->to_device(*t, MemKind::Workspace);
    calls(*mma, dev);
    for (const auto& [name, field] :
         {std::pair{"dq", &AttentionOperands::dq}, std::pair{"dk", &AttentionOperands::dk},
          std::pair{"dv", &AttentionOperands::dv}}) {
      const Tensor mine = got.*field, theirs = convert_dtype(mma->to_host(dev.*field), dt);
      Harness::expect_near(std::string(name) + " sm90 vs reference " + what, mine, truth.*field,
                           4 * Harness::tol(dt));
      Harness::expect_near(std::string(name) + " sm90 vs mma " + what, mine, theirs,
                           2 * Harness::tol(dt));
    }
  }

  bool gpu = false;
};

AttentionShape shape(int64_t hd, int64_t B, int64_t S, int64_t H, int64_t KV, int64_t window,
                     bool round_scores = false) {
  return {B, S, H, KV, hd, window, round_scores};
}

// One head a group; 100 positions: a full and a partial tile of 64 on both sides.
TEST_P(AttentionSm90Bwd, CausalWithAPartialTile) {
  for (const int64_t hd : {256, 512}) check(shape(hd, 1, 100, 2, 2, 0), 1);
}

// Groups of 2, two sequences (a box reaches into the next one), a sliding window, two documents.
TEST_P(AttentionSm90Bwd, GroupsOfTwoSlidingWindowAndSegments) {
  for (const int64_t hd : {256, 512}) check(shape(hd, 2, 70, 4, 2, 40), 2);
}

// Sequences a whole number of tiles long (the last tile of a ring interior too), and a window
// wide enough that whole tiles inside it skip the mask: the interior shortcut with its window
// clauses true, at the sequence's end.
TEST_P(AttentionSm90Bwd, InteriorTilesInsideAWindowAndAtTheSequenceEnd) {
  for (const int64_t hd : {256, 512}) check(shape(hd, 1, 256, 2, 1, 96), 1);
}

// Groups of 4 (dk, dv summed over four heads), a window short enough that whole tiles are never
// visited (query tile 2 sees no key of tile 0), three documents, scores rounded to bfloat16.
TEST_P(AttentionSm90Bwd, GroupsOfFourShortWindowRoundedScores) {
  for (const int64_t hd : {256, 512}) check(shape(hd, 1, 150, 4, 1, 30, true), 3);
}

// Rows past a sequence's end read as zeros (3-D tensor maps), not as the next sequence's: with
// every input of sequence 1 infinite, sequence 0's dq, dk and dv are finite and agree with the
// mma kernels' (whose cp.async fills zeros). S = 70 puts a partial tile at the boundary on both
// sides.
TEST_P(AttentionSm90Bwd, TheNextSequenceCannotReachThisOne) {
  for (const int64_t hd : {256, 512}) {
    const AttentionShape s = shape(hd, 2, 70, 2, 1, 0);
    const int64_t S = s.seq, T = 2 * S, H = 2, KV = 1;
    Harness h(cuda_backend(gpu, "mma"));
    // Sequence 1 (rows S..2S of [T, heads, hd]) all +inf, in bfloat16.
    auto poisoned = [&](int64_t heads, double scale) {
      Tensor t = h.rand({T, heads, hd}, DType::F32, scale);
      float* x = t.data<float>();
      for (int64_t i = S * heads * hd; i < T * heads * hd; ++i)
        x[i] = std::numeric_limits<float>::infinity();
      return convert_dtype(t, DType::BF16);
    };
    struct Inputs {
      Tensor q, k, v, segment_ids, dout;
    };
    const Inputs inputs{poisoned(H, 0.3), poisoned(KV, 0.3), poisoned(KV, 1.0),
                        h.ints(documents(2, S, 1)), poisoned(H, 1.0)};
    std::vector<Tensor> out[2];  // dq, dk, dv of sequence 0, on sm90 and on mma
    const char* paths[] = {"sm90", "mma"};
    for (int path = 0; path < 2; ++path) {
      const std::unique_ptr<Backend> be = cuda_backend(gpu, paths[path]);
      Inputs t = inputs;
      for (Tensor* x : conformance::fields(t)) *x = be->to_device(*x, MemKind::Workspace);
      auto zeros = [&](const Shape& shape, DType dt) {
        return be->to_device(Tensor::zeros(shape, dt), MemKind::Workspace);
      };
      const Tensor o = zeros({T, H, hd}, DType::BF16), lse = zeros({2, H, S}, DType::F32);
      const Tensor dq = zeros({T, H, hd}, DType::BF16), dk = zeros({T, KV, hd}, DType::BF16),
                   dv = zeros({T, KV, hd}, DType::BF16);
      be->attention_forward({.o = o,
                             .lse = lse,
                             .q = t.q,
                             .k = t.k,
                             .v = t.v,
                             .segment_ids = t.segment_ids,
                             .shape = s});
      be->attention_backward({.dq = dq,
                              .dk = dk,
                              .dv = dv,
                              .dout = t.dout,
                              .q = t.q,
                              .k = t.k,
                              .v = t.v,
                              .o = o,
                              .lse = lse,
                              .segment_ids = t.segment_ids,
                              .shape = s});
      for (const Tensor& g : {dq, dk, dv}) {
        const Tensor all = convert_dtype(be->to_host(g), DType::F32);
        Tensor first = Tensor::zeros({S, g.shape()[1], hd}, DType::F32);
        std::memcpy(first.data<float>(), all.data<float>(), first.numel() * sizeof(float));
        out[path].push_back(first);
      }
    }
    const char* names[] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; ++i) {
      const std::string what = std::string(names[i]) + " of sequence 0, head_dim " +
                               std::to_string(hd);
      bool finite = true;
      for (int64_t e = 0; e < out[0][i].numel(); ++e)
        finite = finite && std::isfinite(out[0][i].data<float>()[e]);
      EXPECT_TRUE(finite) << what << ": a non-finite value of sequence 1 reached it";
      Harness::expect_near(what + " sm90 vs mma", out[0][i], out[1][i],
                           2 * Harness::tol(DType::BF16));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, AttentionSm90Bwd, ::testing::Values("emulated", "gpu"),
                         [](const auto& info) { return std::string(info.param); });

// The sm90 kernels are the ones that run with cuda_attention=sm90 and head_dim 256 or 512 (no
// silent fallback), not with cuda_attention=mma; head_dim 128 falls back to the mma kernels.
TEST(AttentionSm90BwdEmulated, TheSm90KernelsRunWhereTheyApply) {
  for (const int64_t hd : {128, 256, 512})
    for (const char* path : {"sm90", "mma"}) {
      const std::unique_ptr<Backend> be = cuda_backend(false, path);
      auto& emu = dynamic_cast<cuda::EmulatedBackend&>(*be);
      const int64_t T = 4;
      auto zeros = [&](int64_t heads) {
        return be->to_device(Tensor::zeros({T, heads, hd}, DType::BF16), MemKind::Workspace);
      };
      const Tensor q = zeros(2), k = zeros(1), dq = zeros(2), dk = zeros(1);
      const Tensor lse = be->to_device(Tensor::zeros({1, 2, T}, DType::F32), MemKind::Workspace);
      const Tensor seg = be->to_device(Tensor::zeros({T}, DType::I32), MemKind::Workspace);
      const kern::AttnDims d{1, T, 2, 1, hd, 0, false};
      EXPECT_EQ(cuda::ops::attention_backward_sm90(emu.platform(), dq, dk, dk, q, q, k, k, q, lse,
                                                   seg, d),
                hd != 128 && std::string(path) == "sm90")
          << path << " head_dim " << hd;
    }
}

// A whole bfloat16 forward and backward of a small model whose sliding layers have head_dim 256
// and global layers 512, both on the sm90 kernels (noting no fallback the mma path does not):
// the loss and gradients of cuda_attention=mma, to rounding.
TEST(AttentionSm90BwdEmulated, ModelGradientsAgreeWithTheMmaKernels) {
  ModelConfig cfg = testing::tensor_core_test_config(true);
  cfg.sliding_window = 5;
  const Batch batch = testing::make_batch(1, 20, cfg.vocab_size, 5, 9);
  const testing::PathSteps steps =
      testing::step_per_path(cfg, batch, &BackendOptions::cuda_attention, {"mma", "sm90"});
  testing::expect_same_step_on_both_paths(steps);
  const std::vector<Tensor>& grads = steps.grads;
  Harness::expect_near("model gradients sm90 vs mma", grads[1], grads[0], 2 * Harness::tol(DType::BF16));
  // ... and not trivially: the attention weights' gradients are not all zero.
  double largest = 0;
  for (int64_t i = 0; i < grads[0].numel(); ++i)
    largest = std::max(largest, double(std::abs(grads[0].data<float>()[i])));
  EXPECT_GT(largest, 0.0);
}

}  // namespace
}  // namespace gemmax
