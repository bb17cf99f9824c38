// The decoder's KV cache (model/decode.h): prefill and step decoding against the full forward
// pass at every position, and the sliding layers' ring buffer of `window` slots.
#include "gemmax/model/decode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <span>

#include "gemmax/backend/reference/reference_backend.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::expect_error;
using testing::max_abs_diff;
using testing::random_weights;

struct DecodeFixture {
  ModelConfig cfg;  // layers 1, 3 global; window 3
  ReferenceBackend be;
  std::vector<int32_t> tokens;
  explicit DecodeFixture(const ModelConfig& c = testing::small_test_config(4)) : cfg(c) {
    Rng rng(5);
    for (int i = 0; i < 13; ++i) tokens.push_back(int32_t(rng.uniform_int(cfg.vocab_size)));
  }
  int64_t S() const { return int64_t(tokens.size()); }
  // The soft-capped logits of every position from Gemma4Model::forward [S, V].
  Tensor forward_logits(Gemma4Model& model, const Tensor& w) {
    Batch b;
    b.batch = 1;
    b.seq = S();
    for (int64_t i = 0; i < S(); ++i) {
      b.inputs.push_back(tokens[i]);
      b.targets.push_back(0);
      b.positions.push_back(int32_t(i));
      b.segment_ids.push_back(1);
      b.target_segment_ids.push_back(1);
    }
    Tensor logits;
    model.forward(upload_batch(be, b), w, &logits);
    return logits;
  }
};

// Largest |difference| between decoder logits [V] and row p of the forward's.
double row_diff(const Tensor& got, const Tensor& ref, int64_t p) {
  return max_abs_diff(got, ref.rows(p, p + 1).view(got.shape()));
}

// Both blocks: the MoE one, and the small block of gemma4-e2b/e4b (per-layer inputs; layers 2
// and 3 attend over the caches of layers 0 and 1, and keep none of their own).
class DecoderOn : public ::testing::TestWithParam<bool> {};

TEST_P(DecoderOn, PrefillAndStepsGiveTheForwardLogitsAtEveryPosition) {
  const bool small_block = GetParam();
  DecodeFixture f(small_block ? testing::small_block_config() : testing::small_test_config(4));
  ASSERT_GT(f.S(), 3 * f.cfg.sliding_window) << "the ring must wrap";
  ASSERT_FALSE(f.cfg.is_global(0));
  ASSERT_TRUE(f.cfg.is_global(1));
  ASSERT_EQ(f.cfg.kv_shared(3), small_block);
  for (DType dt : {DType::F64, DType::F32}) {
    Gemma4Model model(f.cfg, f.be, {dt, RematPolicy::None, 1});
    const Tensor w = random_weights(model.params(), 7, dt);
    const Tensor ref = f.forward_logits(model, w);
    double scale = 0;
    for (int64_t i = 0; i < ref.numel(); ++i)
      scale = std::max(scale, std::abs(get_as_double(ref, i)));
    const double tol = dt == DType::F64 ? 1e-12 : 2e-5 * scale;
    std::vector<int32_t> toks = f.tokens;

    // One token at a time: a ring of exactly `window` slots.
    double worst_steps = 0;
    {
      Decoder d(model, w, {f.S(), /*prefill_chunk=*/1});
      EXPECT_EQ(d.cache_slots(0), f.cfg.sliding_window);
      for (int64_t l = 0; l < f.cfg.num_layers; ++l)
        if (f.cfg.kv_shared(l)) EXPECT_EQ(d.cache_slots(l), 0) << "layer " << l;
      worst_steps = row_diff(d.prefill(std::span(toks).first(1)), ref, 0);
      for (int64_t p = 1; p < f.S(); ++p)
        worst_steps = std::max(worst_steps, row_diff(d.step(toks[p]), ref, p));
    }
    // The whole sequence in prefill chunks of 4 (ring of 6 slots, wrapping inside chunks).
    double worst_prefill = 0;
    {
      Decoder d(model, w, {f.S(), /*prefill_chunk=*/4});
      EXPECT_EQ(d.cache_slots(0), f.cfg.sliding_window + 3);
      Tensor all;
      const Tensor last = d.prefill(toks, &all);
      worst_prefill = max_abs_diff(all, ref);
      EXPECT_EQ(max_abs_diff(last, all.rows(f.S() - 1, f.S()).view(last.shape())), 0.0);
      EXPECT_EQ(d.length(), f.S());
    }
    // A prompt of 5 (chunks of the window), then steps: what generation does.
    double worst_mixed = 0;
    {
      Decoder d(model, w, {f.S(), 0});
      worst_mixed = row_diff(d.prefill(std::span(toks).first(5)), ref, 4);
      for (int64_t p = 5; p < f.S(); ++p)
        worst_mixed = std::max(worst_mixed, row_diff(d.step(toks[p]), ref, p));
      // The decoder is full: one more position is a clear error.
      expect_error([&] { d.step(0); }, {"exceed max_length 13"});
    }
    EXPECT_LE(worst_steps, tol) << dtype_name(dt);
    EXPECT_LE(worst_prefill, tol) << dtype_name(dt);
    EXPECT_LE(worst_mixed, tol) << dtype_name(dt);
    std::cout << "decode vs forward, " << (small_block ? "small block, " : "") << dtype_name(dt)
              << " (max |logit| " << scale << "): steps " << worst_steps << ", prefill chunks of 4 "
              << worst_prefill << ", prefill 5 + steps " << worst_mixed << "\n";
    ::testing::Test::RecordProperty(
        std::string("max_abs_diff_") + std::string(dtype_name(dt)),
        std::to_string(std::max({worst_steps, worst_prefill, worst_mixed})));
  }
}

INSTANTIATE_TEST_SUITE_P(Blocks, DecoderOn, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "SmallBlock" : "MoeBlock";
                         });

// A chat turn keeps the conversation's cache and forgets what the next render spells another
// way: truncating, then prefilling the rest, gives the forward's logits again; a truncation
// reaching back past what a sliding ring still holds is refused and changes nothing.
TEST(Decoder, TruncatingThenContinuingGivesTheForwardLogits) {
  DecodeFixture f;
  Gemma4Model model(f.cfg, f.be, {DType::F64, RematPolicy::None, 1});
  const Tensor w = random_weights(model.params(), 7, DType::F64);
  const Tensor ref = f.forward_logits(model, w);
  std::vector<int32_t> toks = f.tokens, other = f.tokens;
  for (size_t i = 6; i < other.size(); ++i) other[i] = (other[i] + 1) % int32_t(f.cfg.vocab_size);
  Decoder d(model, w, {f.S(), /*prefill_chunk=*/4});  // rings of window 3 + 3 slots
  d.prefill(std::span(other).first(8));               // a first render that differs from 6 on
  ASSERT_FALSE(d.truncate(1));  // 7 positions back: the rings have wrapped over position 0's window
  EXPECT_EQ(d.length(), 8);
  ASSERT_TRUE(d.truncate(6));
  // Truncating again counts from the most written, not from the length: the rings lost the
  // window before position 4 when positions 6 and 7 were written.
  EXPECT_FALSE(d.truncate(4));
  EXPECT_EQ(d.length(), 6);
  Tensor all;
  d.prefill(std::span(toks).subspan(6), &all);
  EXPECT_LE(max_abs_diff(all, ref.rows(6, f.S())), 1e-12);
}

TEST(Decoder, SlidingLayersKeepOnlyTheirWindow) {
  DecodeFixture f;
  ReferenceBackend& be = f.be;
  Gemma4Model model(f.cfg, be, {DType::F32, RematPolicy::None, 1});
  const Tensor w = random_weights(model.params(), 3, DType::F32);
  Decoder short_run(model, w, {16, 1}), long_run(model, w, {4096, 1});
  for (int64_t l = 0; l < f.cfg.num_layers; ++l) {
    if (f.cfg.is_global(l)) {
      EXPECT_EQ(long_run.cache_slots(l), 4096);
    } else {
      EXPECT_EQ(short_run.cache_slots(l), f.cfg.sliding_window) << "layer " << l;
      EXPECT_EQ(long_run.cache_slots(l), f.cfg.sliding_window) << "layer " << l;
    }
  }
  // Only the global layers grow with the length: (k + v) * KV * hd floats + a position.
  const size_t per_global_position =
      size_t(2 * f.cfg.global_num_kv_heads * f.cfg.global_head_dim * 4 + 4);
  EXPECT_EQ(long_run.cache_bytes() - short_run.cache_bytes(),
            size_t(f.cfg.num_global_layers()) * (4096 - 16) * per_global_position);
  // A prefill chunk longer than the sequence is clamped; a short run never exceeds its length.
  Decoder tiny(model, w, {2, 0});
  EXPECT_EQ(tiny.cache_slots(0), 2);
  EXPECT_EQ(tiny.cache_slots(1), 2);
  // Decoding far past the window allocates nothing more.
  const size_t bytes = long_run.cache_bytes();
  for (int64_t p = 0; p < 100; ++p) long_run.step(f.tokens[p % f.tokens.size()]);
  EXPECT_EQ(long_run.length(), 100);
  EXPECT_EQ(long_run.cache_bytes(), bytes);
}

}  // namespace
}  // namespace gemmax
