// Incremental decoding with a KV cache: the model's own layers (model/layer.h) run on the new
// tokens only, and their attention reads the keys and values of earlier tokens from a cache.
//
// Each layer keeps its normed, rotated k and normed v per position (on K = V layers the two
// differ, so both are kept). Global layers keep every position up to max_length. Sliding
// layers keep a ring of window + prefill_chunk - 1 slots (position p in slot p % slots): the
// last `window` positions, plus room for one prefill chunk, whose keys are written before its
// queries attend (so the oldest key the chunk's first query needs is still there). Stepping
// one token at a time with prefill_chunk 1 keeps exactly `window` slots; either way memory is
// O(window), not O(length). The small block's sharing layers keep no cache: they attend over
// their donor's.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gemmax/model/attention.h"
#include "gemmax/model/gemma4.h"
#include "gemmax/model/lora/lora_params.h"

namespace gemmax {

class Progress;

struct DecoderOptions {
  int64_t max_length = 0;     // positions the decoder can hold (prompt + generated tokens)
  int64_t prefill_chunk = 0;  // tokens per pass in prefill; 0: the sliding window
  BoundAdapters lora;         // LoRA adapters on the weights, applied unmerged (none: empty)
};

class Decoder final : private AttentionCore {
 public:
  // `weights` is the model's flat buffer (dtype: the model's activation dtype); both must
  // outlive the decoder.
  Decoder(const Gemma4Model& model, const Tensor& weights, const DecoderOptions& options);

  // Appends `tokens` (in chunks of at most prefill_chunk) and returns the soft-capped logits
  // [V] that follow the last one, on the host. With all_logits, that receives the logits of
  // every token [n, V] (for checks); `progress`, if given, counts the tokens done.
  Tensor prefill(std::span<const int32_t> tokens, Tensor* all_logits = nullptr,
                 Progress* progress = nullptr);
  // Appends one token; returns the next-token logits [V] on the host.
  Tensor step(int32_t token);

  int64_t length() const { return length_; }  // positions appended so far
  void reset() { length_ = written_ = 0; }    // forget the sequence (slots are rewritten)
  // Forgets the positions from `length` on, keeping the earlier ones, where every sliding
  // layer's ring still holds the window before `length` (it has not wrapped over it since);
  // returns false, changing nothing, where it does not. The forgotten slots need no clearing:
  // a query never sees a position after its own, and each is rewritten before it could.
  bool truncate(int64_t length);
  // 0 for a layer that shares its donor's K/V (gemma4-e2b/e4b's last layers): it keeps none.
  int64_t cache_slots(int64_t layer) const { return caches_[layer].slots; }
  size_t cache_bytes() const;  // k, v and positions of every layer

 private:
  struct LayerCache {
    int64_t slots = 0;   // positions it can hold at once
    int64_t window = 0;  // 0: global layer
    Tensor k, v;         // [slots, KV, hd]
    Tensor positions;    // int32 [slots]: the position each slot holds, -1: empty
  };

  // Runs tokens at positions length_.. through the model; returns the logits of the last
  // `rows` of them [rows, V] (on the backend's device).
  Tensor run(std::span<const int32_t> tokens, int64_t rows);
  void attend(const LayerContext& ctx, int64_t layer, AttentionActs& acts) override;

  const Gemma4Model& model_;
  Backend& be_;
  DecoderOptions options_;
  ModelWeights weights_;  // layers in the compute dtype; embed is the master (lookup)
  Tensor head_embed_;     // the tied table in the compute dtype, for the head
  Tensor rope_local_, rope_global_;  // RoPE inverse frequencies
  std::vector<LayerCache> caches_;
  int64_t length_ = 0;
  int64_t written_ = 0;  // the most positions written since reset(): what the rings may have lost
};

}  // namespace gemmax
