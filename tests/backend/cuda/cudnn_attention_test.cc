// cuDNN's fused attention (cuda_attention=cudnn). Here, without a GPU: the host glue (the graph's
// layouts and strides for [B*S, H, hd] with GQA, the window as cuDNN's diagonal band, which
// calls cuDNN takes and which fall back, the workspace), the emulator's refusal, and the
// one-segment hint the model gives it. On a GPU (/gpu, skipped without one; bench/gpu_check.sh
// runs them): cuDNN's forward and backward against the reference backend and the mma kernels,
// and the fallback for packed documents.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/backend/cuda/cudnn_attention_plan.h"
#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/base/convert.h"
#include "gemmax/base/rng.h"
#include "gemmax/model/context.h"
#include "test_util.h"
#include "cuda_paths.h"

namespace gemmax {
namespace {

using cuda::SdpaTensor;

kern::AttnDims dims(int64_t B, int64_t S, int64_t H, int64_t KV, int64_t hd, int64_t window,
                    bool round_scores = false) {
  return {B, S, H, KV, hd, window, round_scores};
}

int64_t offset(const SdpaTensor& t, int64_t b, int64_t h, int64_t s, int64_t d) {
  return b * t.stride[0] + h * t.stride[1] + s * t.stride[2] + d * t.stride[3];
}

// Every element cuDNN addresses through the plan is the op's own: q [B*S, H, hd] (and o), k, v
// [B*S, KV, hd], lse [B, H, S].
TEST(CudnnAttentionPlan, StridesAddressTheOpsLayoutsWithGqa) {
  const int64_t B = 2, S = 7, H = 6, KV = 2, hd = 256;
  const cuda::SdpaChoice c = cuda::choose_cudnn_attention(dims(B, S, H, KV, hd, 0), {.one_segment = true});
  ASSERT_TRUE(c.plan) << c.why;
  const cuda::SdpaPlan& p = *c.plan;
  EXPECT_EQ(p.q.dim, (std::array<int64_t, 4>{B, H, S, hd}));
  EXPECT_EQ(p.k.dim, (std::array<int64_t, 4>{B, KV, S, hd}));
  EXPECT_EQ(p.stats.dim, (std::array<int64_t, 4>{B, H, S, 1}));
  EXPECT_EQ(p.o, p.q);
  EXPECT_EQ(p.v, p.k);
  EXPECT_EQ(p.scale, 1.0f);  // Gemma-4's scores are not scaled (the reference's 1.0)
  EXPECT_EQ(p.heads % p.kv_heads, 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t d = 0; d < hd; d += 17) {
        for (int64_t h = 0; h < H; ++h) {
          ASSERT_EQ(offset(p.q, b, h, s, d), ((b * S + s) * H + h) * hd + d);
          ASSERT_EQ(offset(p.stats, b, h, s, 0), (b * H + h) * S + s);
        }
        for (int64_t h = 0; h < KV; ++h)
          ASSERT_EQ(offset(p.k, b, h, s, d), ((b * S + s) * KV + h) * hd + d);
      }
}

// cuDNN keeps key j for query i iff j <= i (right bound 0, diagonal at the top left) and
// j + left_bound > i: with left_bound = window that is the kernels' causal_visible, pair by pair;
// a window as long as the sequence or longer is no window.
TEST(CudnnAttentionPlan, TheWindowIsCudnnsLeftBoundOneForOne) {
  const int64_t S = 40;
  for (int64_t window : {0, 1, 2, 5, 39, 40, 41, 1024}) {
    const cuda::SdpaChoice c =
        cuda::choose_cudnn_attention(dims(1, S, 2, 1, 256, window), {.one_segment = true});
    ASSERT_TRUE(c.plan) << c.why;
    const int64_t lb = c.plan->left_bound;
    EXPECT_EQ(lb, window < S ? window : 0) << "window " << window;
    for (int64_t i = 0; i < S; ++i)
      for (int64_t j = 0; j < S; ++j) {
        const bool cudnn_keeps = j <= i && (lb == 0 || j + lb > i);
        ASSERT_EQ(cudnn_keeps, kern::causal_visible(i, j, window))
            << "window " << window << " query " << i << " key " << j;
      }
  }
}

TEST(CudnnAttentionPlan, WhatCudnnTakesAndWhatFallsBackSayingWhy) {
  const cuda::SdpaCall ok{.one_segment = true};
  EXPECT_TRUE(cuda::choose_cudnn_attention(dims(2, 64, 16, 8, 256, 1024), ok).plan);
  struct Case {
    kern::AttnDims d;
    cuda::SdpaCall call;
    const char* why;
  };
  for (const Case& c : std::vector<Case>{
           {dims(1, 64, 16, 2, 512, 0), ok, "head_dim 256, not 512"},
           {dims(1, 64, 16, 2, 128, 0), ok, "head_dim 256, not 128"},
           {dims(1, 64, 16, 8, 256, 16, true), ok, "rounded to bfloat16"},
           {dims(1, 64, 16, 8, 256, 16), {.one_segment = false}, "ragged offsets"},
           {dims(1, 64, 16, 8, 256, 16), {.one_segment = true, .aligned = false}, "16-byte"},
           {dims(1, 64, 16, 8, 256, 16), {.bf16 = false, .one_segment = true}, "bfloat16"},
       }) {
    const cuda::SdpaChoice got = cuda::choose_cudnn_attention(c.d, c.call);
    EXPECT_FALSE(got.plan) << c.why;
    EXPECT_NE(got.why.find(c.why), std::string::npos) << got.why;
    EXPECT_NE(got.shape_class.find("head_dim=" + std::to_string(c.d.hd)), std::string::npos);
  }
}

TEST(CudnnAttentionPlan, GraphKeysTellShapesApart) {
  const cuda::SdpaCall ok{.one_segment = true};
  auto key = [&](const kern::AttnDims& d) { return cuda::choose_cudnn_attention(d, ok).plan->key(); };
  const auto base = key(dims(2, 64, 16, 8, 256, 16));
  EXPECT_EQ(base, key(dims(2, 64, 16, 8, 256, 16)));
  for (const kern::AttnDims& d : {dims(1, 64, 16, 8, 256, 16), dims(2, 65, 16, 8, 256, 16),
                                  dims(2, 64, 16, 4, 256, 16), dims(2, 64, 8, 8, 256, 16),
                                  dims(2, 64, 16, 8, 256, 17), dims(2, 64, 16, 8, 256, 0)})
    EXPECT_NE(base, key(d));
  // Windows at least as long as the sequence are one graph: no band.
  EXPECT_EQ(key(dims(2, 64, 16, 8, 256, 64)), key(dims(2, 64, 16, 8, 256, 0)));
}

TEST(CudnnAttentionPlan, WorkspaceSharedWhenItFitsElseABlockRoundedTo2MiB) {
  const size_t mib = size_t(1) << 20, shared = 32 * mib, limit = size_t(4) << 30;
  EXPECT_EQ(cuda::cudnn_workspace_block(0, shared, limit), 0u);
  EXPECT_EQ(cuda::cudnn_workspace_block(int64_t(shared), shared, limit), 0u);
  EXPECT_EQ(cuda::cudnn_workspace_block(int64_t(shared) + 1, shared, limit), 34 * mib);
  EXPECT_EQ(cuda::cudnn_workspace_block(int64_t(64 * mib), shared, limit), 64 * mib);
  EXPECT_THROW(cuda::cudnn_workspace_block(-1, shared, limit), Error);
  try {
    cuda::cudnn_workspace_block(int64_t(limit) + 1, shared, limit);
    FAIL() << "a workspace over the limit was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda_attention=mma"), std::string::npos) << e.what();
  }
}

TEST(CudnnAttentionPlan, TheEmulatorRefusesCudnnByName) {
  BackendOptions o;
  o.name = "cuda_emulated";
  o.cuda_attention = CudaAttention::kCudnn;
  try {
    make_backend(o);
    FAIL() << "cuda_emulated took cuda_attention=cudnn";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda_emulated cannot run cuDNN"), std::string::npos)
        << e.what();
  }
}

// The hint cuDNN's path runs on: every row of one value, told apart from packed documents and
// padding.
TEST(CudnnAttentionPlan, UploadTellsOneSegmentRowsFromPackedOnes) {
  ReferenceBackend be;
  auto one_segment = [&](std::vector<int32_t> seg) {
    Batch b;
    b.batch = 2;
    b.seq = int64_t(seg.size()) / 2;
    b.inputs = b.targets = b.positions = b.target_segment_ids = std::vector<int32_t>(seg.size(), 1);
    b.segment_ids = seg;
    return upload_batch(be, b).one_segment;
  };
  EXPECT_TRUE(one_segment({1, 1, 1, 1, 1, 1}));
  EXPECT_TRUE(one_segment({1, 1, 1, 2, 2, 2}));  // one per row, different rows
  EXPECT_FALSE(one_segment({1, 1, 2, 1, 1, 1}));  // packed documents
  EXPECT_FALSE(one_segment({1, 1, 1, 1, 1, 0}));  // padding
}

// The cuda module says whether it was built with cuDNN's frontend (and which), or why not.
TEST(CudnnAttentionBuild, SaysWhetherTheFrontendIsBuilt) {
  if (std::string why; !cuda::cuda_module_loads(&why)) GTEST_SKIP() << why;
  const cuda::LoadedModule& m = cuda::cuda_module();
  if (m.cudnn_frontend_version.empty()) {
    EXPECT_NE(m.cudnn_unavailable.find("GEMMAX_CUDNN_FRONTEND_DIR"), std::string::npos)
        << m.cudnn_unavailable;
  } else {
    EXPECT_EQ(m.cudnn_frontend_version, "1.32.0");
  }
}

// ---- on a GPU --------------------------------------------------------------------------------

class CudnnAttentionGpu : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (const std::string why = testing::no_gpu(true); !why.empty()) GTEST_SKIP() << why;
    if (cuda::cuda_module().cudnn_frontend_version.empty())
      GTEST_SKIP() << cuda::cuda_module().cudnn_unavailable;
    cudnn = testing::cuda_backend(true, &BackendOptions::cuda_attention, "cudnn");
    mma = testing::cuda_backend(true, &BackendOptions::cuda_attention, "mma");
  }

  Tensor rand(const Shape& s, double scale) {
    return testing::random_tensor(s, rng, scale, DType::BF16);
  }
  // o, lse, dq, dk, dv of one forward and backward on be; `notes`: what the backend said.
  std::vector<Tensor> run(Backend& be, const AttentionShape& s, const std::vector<Tensor>& in,
                          std::string* notes = nullptr) {
    using testing::copy_for;
    const int64_t T = s.batch * s.seq;
    const Tensor q = copy_for(be, in[0]), k = copy_for(be, in[1]), v = copy_for(be, in[2]),
                 seg = copy_for(be, in[3]), dout = copy_for(be, in[4]);
    const Tensor o = be.alloc({T, s.num_heads, s.head_dim}, DType::BF16, MemKind::Workspace);
    const Tensor lse = be.alloc({s.batch, s.num_heads, s.seq}, DType::F32, MemKind::Workspace);
    const Tensor dq = be.alloc(q.shape(), DType::BF16, MemKind::Workspace);
    const Tensor dk = be.alloc(k.shape(), DType::BF16, MemKind::Workspace);
    const Tensor dv = be.alloc(v.shape(), DType::BF16, MemKind::Workspace);
    if (notes) ::testing::internal::CaptureStderr();
    be.attention_forward({.o = o, .lse = lse, .q = q, .k = k, .v = v, .segment_ids = seg, .shape = s});
    be.attention_backward({.dq = dq, .dk = dk, .dv = dv, .dout = dout, .q = q, .k = k, .v = v,
                           .o = o, .lse = lse, .segment_ids = seg, .shape = s});
    std::vector<Tensor> out;
    for (const Tensor& t : {o, lse, dq, dk, dv})
      out.push_back(be.name() == "reference" ? t : testing::host_result(be, t));
    if (notes) *notes = ::testing::internal::GetCapturedStderr();
    return out;
  }
  void check(const AttentionShape& s, const std::vector<int32_t>& seg, bool expect_cudnn) {
    const int64_t T = s.batch * s.seq;
    const std::vector<Tensor> in = {rand({T, s.num_heads, s.head_dim}, 0.7),
                                    rand({T, s.num_kv_heads, s.head_dim}, 0.7),
                                    rand({T, s.num_kv_heads, s.head_dim}, 1.0),
                                    conformance::Harness::ints(seg),
                                    rand({T, s.num_heads, s.head_dim}, 1.0)};
    std::string notes;
    const std::vector<Tensor> got = run(*cudnn, s, in, &notes);
    EXPECT_EQ(notes.find("not cuDNN") == std::string::npos, expect_cudnn) << notes;
    const std::vector<Tensor> truth = run(ref, s, in), kernels = run(*mma, s, in);
    const char* names[] = {"o", "lse", "dq", "dk", "dv"};
    for (size_t i = 0; i < got.size(); ++i) {
      testing::expect_close_bf16(std::string(names[i]) + " vs reference", got[i], truth[i]);
      testing::expect_close_bf16(std::string(names[i]) + " vs mma", got[i], kernels[i]);
    }
  }

  Rng rng{41};
  ReferenceBackend ref;
  std::unique_ptr<Backend> cudnn, mma;
};

// head_dim 256 with GQA, a window shorter than the sequence, none, and one longer than it;
// partial tiles (S not a multiple of 64 or 128).
TEST_P(CudnnAttentionGpu, ForwardAndBackwardMatchTheReferenceAndTheMmaKernels) {
  for (const AttentionShape& s :
       {AttentionShape{2, 200, 4, 2, 256, 64}, AttentionShape{1, 300, 8, 1, 256, 0},
        AttentionShape{1, 130, 2, 2, 256, 1024}}) {
    AttentionShape one = s;
    one.one_segment = true;
    check(one, std::vector<int32_t>(size_t(s.batch * s.seq), 1), true);
  }
}

// Packed documents are not cuDNN's here: the call says so and runs the kernels, exactly.
TEST_P(CudnnAttentionGpu, PackedDocumentsFallBackToTheKernels) {
  const AttentionShape s{1, 160, 4, 2, 256, 48};
  std::vector<int32_t> seg(160, 1);
  for (size_t i = 70; i < seg.size(); ++i) seg[i] = 2;
  check(s, seg, false);
}

INSTANTIATE_TEST_SUITE_P(Paths, CudnnAttentionGpu, ::testing::Values("gpu"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace gemmax
