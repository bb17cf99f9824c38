// Conformance cases (op_conformance.h): attention forward and backward, and the attention of new
// tokens over a KV cache. Outputs within 2 criteria of the truth, gradients within 4 (a
// bfloat16 probability tile feeds each product); lse within 1e-5.
#include "op_conformance.h"
#include "test_util.h"

namespace gemmax::conformance {

namespace {

// Forward and backward of one shape on q, k, v drawn at `qk_scale`, `segments` giving each
// position's document.
void check_attention(Harness& h, DType dt, const AttentionShape& s,
                     const std::vector<int32_t>& segments, double qk_scale, const std::string& what,
                     bool forward_only = false) {
  auto [got, truth] =
      h.run(attention_operands(h, dt, s, segments, qk_scale), attention_calls(s, forward_only));
  h.expect_near("attention o " + what, got.o, truth.o, 2 * h.tol(dt));
  h.expect_near("attention lse " + what, got.lse, truth.lse, 1e-5, 1e-5);
  if (forward_only) return;
  h.expect_near("attention dq " + what, got.dq, truth.dq, 4 * h.tol(dt));
  h.expect_near("attention dk " + what, got.dk, truth.dk, 4 * h.tol(dt));
  h.expect_near("attention dv " + what, got.dv, truth.dv, 4 * h.tol(dt));
}

}  // namespace

AttentionOperands attention_operands(Harness& h, DType dt, const AttentionShape& s,
                                     const std::vector<int32_t>& segments, double qk_scale) {
  const int64_t T = s.batch * s.seq, H = s.num_heads, KV = s.num_kv_heads, hd = s.head_dim;
  return {.q = h.rand({T, H, hd}, dt, qk_scale),
          .k = h.rand({T, KV, hd}, dt, qk_scale),
          .v = h.rand({T, KV, hd}, dt),
          .segment_ids = h.ints(segments),
          .o = h.zeros({T, H, hd}, dt),
          .lse = h.zeros({s.batch, H, s.seq}),
          .dout = h.rand({T, H, hd}, dt),
          .dq = h.zeros({T, H, hd}, dt),
          .dk = h.zeros({T, KV, hd}, dt),
          .dv = h.zeros({T, KV, hd}, dt)};
}

AttentionCalls attention_calls(const AttentionShape& s, bool forward_only) {
  return [s, forward_only](Backend& be, const AttentionOperands& t) {
    be.attention_forward({.o = t.o,
                          .lse = t.lse,
                          .q = t.q,
                          .k = t.k,
                          .v = t.v,
                          .segment_ids = t.segment_ids,
                          .shape = s});
    if (forward_only) return;
    be.attention_backward({.dq = t.dq,
                           .dk = t.dk,
                           .dv = t.dv,
                           .dout = t.dout,
                           .q = t.q,
                           .k = t.k,
                           .v = t.v,
                           .o = t.o,
                           .lse = t.lse,
                           .segment_ids = t.segment_ids,
                           .shape = s});
  };
}

std::string describe_attention(const AttentionShape& s, int docs) {
  return "B=" + std::to_string(s.batch) + " S=" + std::to_string(s.seq) +
         " H=" + std::to_string(s.num_heads) + "/" + std::to_string(s.num_kv_heads) +
         " hd=" + std::to_string(s.head_dim) + " window=" + std::to_string(s.window) +
         " docs=" + std::to_string(docs) + (s.round_scores ? " round_scores" : "");
}

// Causal GQA attention with windows shorter than, equal to and longer than the sequence, segments,
// the model's head sizes and odd ones.
CONFORMANCE_CASE(AttentionForwardAndBackward) {
  for (DType dt : h.dtypes()) {
    // Row 0 one document, row 1 two.
    const std::vector<int32_t> seg = {1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 4, 4, 4, 7, 7, 7, 7, 7};
    for (int64_t window : {0, 3, 9, 40}) {
      const AttentionShape s{2, 9, 4, 2, 6, window};
      check_attention(h, dt, s, seg, 0.7, describe_attention(s, 2));
    }
    for (const AttentionShape& s :
         {AttentionShape{2, 37, 4, 2, 8, 5}, AttentionShape{1, 50, 2, 1, 12, 0},
          AttentionShape{1, 70, 4, 2, 64, 0}, AttentionShape{1, 100, 4, 4, 128, 0},
          AttentionShape{2, 40, 2, 1, 256, 16}, AttentionShape{1, 150, 4, 2, 256, 40},
          AttentionShape{1, 33, 2, 1, 512, 0}, AttentionShape{1, 70, 8, 1, 512, 0}}) {
      std::vector<int32_t> two_docs(size_t(s.batch * s.seq));
      for (size_t t = 0; t < two_docs.size(); ++t)
        two_docs[t] = int64_t(t) % s.seq < s.seq / 3 ? 1 : 2;
      check_attention(h, dt, s, two_docs, 1.0, describe_attention(s, 2));
    }
  }
}

// Long documents: tiles that hold only visible pairs (no mask), and the diagonal, the window's
// edge, the documents' edges and the sequence's end, which need it.
CONFORMANCE_CASE(AttentionInteriorAndBoundaryTiles) {
  if (h.target().ends_with("_simple"))
    GTEST_SKIP() << "the plain kernels mask every pair: AttentionForwardAndBackward covers them";
  struct Case {
    int64_t S, H, KV, hd, window, docs;
  };
  for (const Case& c : {Case{300, 2, 1, 128, 0, 1}, Case{300, 2, 2, 128, 0, 3},
                        Case{260, 2, 1, 256, 70, 1}, Case{200, 4, 2, 256, 0, 2}}) {
    std::vector<int32_t> seg(size_t(c.S));
    for (int64_t t = 0; t < c.S; ++t) seg[size_t(t)] = int32_t(t * c.docs / c.S);
    const AttentionShape s{1, c.S, c.H, c.KV, c.hd, c.window};
    check_attention(h, DType::BF16, s, seg, 1.0, describe_attention(s, int(c.docs)));
  }
}

void attention_over_many_blocks(Harness& h, bool forward_only) {
  const int64_t S = 300;
  std::vector<int32_t> segs;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < S; ++i) segs.push_back(b == 0 ? 1 : (i < 120 ? 1 : (i < 250 ? 2 : 3)));
  for (int64_t window : {0, 100}) {
    const AttentionShape s{2, S, 8, 2, 40, window};
    check_attention(h, DType::BF16, s, segs, 0.3, describe_attention(s, 3), forward_only);
  }
  // One sequence on one kv head (gemma4-e2b's attention at batch 1), and on two: fewer
  // (sequence, kv head) pairs than threads, so a backend may split a pair's queries among its
  // threads.
  const std::vector<int32_t> one(segs.begin() + S, segs.end());
  for (const int64_t kv : {1, 2})
    for (int64_t window : {0, 100}) {
      const AttentionShape s{1, S, 4 * kv, kv, 40, window};
      check_attention(h, DType::BF16, s, one, 0.3, describe_attention(s, 3), forward_only);
    }
}

// Query blocks that see several key blocks, partly masked blocks and skipped ones.
CONFORMANCE_CASE(AttentionOverManyBlocks) {
  if (h.emulated()) GTEST_SKIP() << "over 2 minutes on the host; runs on the GPU (cuda_gpu)";
  attention_over_many_blocks(h, false);
}

// Cache slots in ring order (one empty), a window that hides the oldest, and no window.
CONFORMANCE_CASE(AttentionDecodeOverARingOfSlots) {
  for (DType dt : h.dtypes())
    for (int64_t window : {4, 0}) {
      const int64_t n = 3, H = 4, KV = 2, hd = 40, C = 9;
      struct Ops {
        Tensor o, q, q_pos, k, v, kv_pos;  // k, v, kv_pos: the cache's C slots
      };
      auto [got, truth] = h.run(Ops{h.zeros({n, H, hd}, dt), h.rand({n, H, hd}, dt),
                                    h.ints({5, 6, 7}), h.rand({C, KV, hd}, dt),
                                    h.rand({C, KV, hd}, dt), h.ints({4, 5, 6, 7, -1, 0, 1, 2, 3})},
                                [&](Backend& be, const Ops& t) {
                                  be.attention_decode({.o = t.o,
                                                       .q = t.q,
                                                       .q_pos = t.q_pos,
                                                       .k = t.k,
                                                       .v = t.v,
                                                       .kv_pos = t.kv_pos,
                                                       .window = window});
                                });
      h.expect_near("attention_decode window=" + std::to_string(window), got.o, truth.o, h.tol(dt));
    }
}

}  // namespace gemmax::conformance
