#include "gemmax/config/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "gemmax/base/error.h"

namespace gemmax {

namespace {
constexpr std::string_view kSlidingType = "sliding_attention", kFullType = "full_attention";

// The l-th entry of a comma-separated layer_types, or an empty view past its end.
std::string_view layer_type(std::string_view list, int64_t l) {
  for (; l > 0; --l) {
    const size_t comma = list.find(',');
    if (comma == std::string_view::npos) return {};
    list.remove_prefix(comma + 1);
  }
  return list.substr(0, list.find(','));
}
}  // namespace

// "s"/"g" per layer: what two configs' layer kinds are compared by, however each states them.
static std::string global_layer_map(const ModelConfig& c) {
  std::string out;
  for (int64_t l = 0; l < c.num_layers; ++l) out += c.is_global(l) ? 'g' : 's';
  return out;
}

bool ModelConfig::is_global(int64_t layer) const {
  if (!layer_types.empty()) return layer_type(layer_types, layer) == kFullType;
  return sliding_window_pattern > 0 && layer % sliding_window_pattern == sliding_window_pattern - 1;
}

int64_t ModelConfig::num_global_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < num_layers; ++l) n += is_global(l);
  return n;
}

int64_t ModelConfig::kv_donor(int64_t layer) const {
  if (!kv_shared(layer)) return -1;
  for (int64_t j = num_layers - num_kv_shared_layers - 1; j >= 0; --j)
    if (is_global(j) == is_global(layer)) return j;
  return -1;
}

void ModelConfig::validate() const {
  // Sizes are bounded so that every product of them (shapes, parameter counts, byte counts)
  // fits in 64 bits: a huge value in a config file is an error, not an overflow.
  constexpr int64_t kMaxDim = int64_t(1) << 24, kMaxLayers = int64_t(1) << 16;
  auto size = [&](int64_t v, const char* key, int64_t max) {
    if (v <= 0) fail("model '", name, "': ", key, " must be positive, got ", v);
    if (v > max) fail("model '", name, "': ", key, " is ", v, ", above the limit ", max);
  };
  size(vocab_size, "vocab_size", int64_t(INT32_MAX));  // token ids are int32
  size(d_model, "base_emb_dim", kMaxDim);
  size(num_layers, "base_num_decoder_layers", kMaxLayers);
  size(num_heads, "base_num_query_heads", kMaxDim);
  size(num_kv_heads, "base_num_kv_heads", kMaxDim);
  size(head_dim, "head_dim", kMaxDim);
  size(global_num_kv_heads, "global_num_kv_heads", kMaxDim);
  size(global_head_dim, "global_head_dim", kMaxDim);
  size(mlp_dim, "base_mlp_dim", kMaxDim);
  size(num_experts, "num_experts", kMaxDim);
  if (has_moe()) {  // the dense layer (num_experts=1) reads neither
    size(moe_mlp_dim, "base_moe_mlp_dim", kMaxDim);
    size(num_experts_per_tok, "num_experts_per_tok", kMaxDim);
  }
  size(sliding_window, "sliding_window_size", int64_t(INT32_MAX));
  if (num_kv_shared_layers < 0 || num_kv_shared_layers >= num_layers)
    fail("model '", name, "': num_kv_shared_layers must lie in [0, base_num_decoder_layers), got ",
         num_kv_shared_layers);
  for (int64_t l = 0; l < num_layers; ++l)
    if (kv_shared(l) && kv_donor(l) < 0)
      fail("model '", name, "': layer ", l, " shares K/V (num_kv_shared_layers ",
           num_kv_shared_layers, ") but no earlier layer is ", is_global(l) ? "global" : "sliding",
           "; lower num_kv_shared_layers");
  if (per_layer_input_dim < 0)
    fail("model '", name, "': hidden_size_per_layer_input must be >= 0, got ",
         per_layer_input_dim);
  if (has_per_layer_inputs()) {
    size(per_layer_input_dim, "hidden_size_per_layer_input", kMaxDim);
    if (per_layer_vocab != vocab_size)  // every token id indexes both tables
      fail("model '", name, "': vocab_size_per_layer_input (", per_layer_vocab,
           ") must equal vocab_size (", vocab_size, ")");
    if (has_moe())
      fail("model '", name, "': per-layer inputs (hidden_size_per_layer_input ",
           per_layer_input_dim, ") come with the dense layer only (num_experts=1), got ",
           num_experts, " experts");
  }
  if (has_moe() && num_experts_per_tok > num_experts)
    fail("model '", name, "': num_experts_per_tok (", num_experts_per_tok,
         ") cannot exceed num_experts (", num_experts, ")");
  if (num_heads % num_kv_heads != 0)
    fail("model '", name, "': base_num_query_heads (", num_heads,
         ") must be a multiple of base_num_kv_heads (", num_kv_heads, ")");
  if (num_heads % global_num_kv_heads != 0)
    fail("model '", name, "': base_num_query_heads (", num_heads,
         ") must be a multiple of global_num_kv_heads (", global_num_kv_heads, ")");
  if (head_dim % 2 != 0 || global_head_dim % 2 != 0)
    fail("model '", name, "': head_dim and global_head_dim must be even for RoPE, got ", head_dim,
         " and ", global_head_dim);
  if (!layer_types.empty()) {
    int64_t n = 0;
    for (std::string_view rest = layer_types;; ++n) {
      const size_t comma = rest.find(',');
      const std::string_view t = rest.substr(0, comma);
      if (t != kSlidingType && t != kFullType)
        fail("model '", name, "': layer_types entry ", n, " is '", t, "'; expected ", kSlidingType,
             " or ", kFullType, ", comma-separated, one per layer");
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    if (n + 1 != num_layers)
      fail("model '", name, "': layer_types lists ", n + 1, " layers but base_num_decoder_layers is ",
           num_layers);
  }
  if (sliding_window_pattern < 0)
    fail("model '", name, "': sliding_window_pattern must be >= 0 (0: no global layers), got ",
         sliding_window_pattern);
  for (double p : {local_rope_proportion, global_rope_proportion})
    if (!(p >= 0 && p <= 1))  // NaN too
      fail("model '", name, "': rope proportions must lie in [0, 1], got ", p);
  auto finite = [&](double v, const char* key, bool zero_ok) {
    if (!std::isfinite(v) || v < 0 || (v == 0 && !zero_ok))
      fail("model '", name, "': ", key, " must be a finite ", zero_ok ? "non-negative" : "positive",
           " number, got ", v);
  };
  finite(local_rope_theta, "local_rope_max_timescale", false);
  finite(global_rope_theta, "global_rope_max_timescale", false);
  finite(final_logits_soft_cap, "final_logits_soft_cap", true);
  finite(norm_eps, "normalization_layer_epsilon", true);
  finite(load_balance_loss_weight, "load_balance_loss_weight", true);
  finite(initializer_range, "initializer_range", true);
  finite(dense_init_scale, "dense_init_scale", false);
  // The largest parameters and the whole count must be addressable.
  const double per_layer =
      (has_moe() ? double(num_experts) * 3.0 * double(moe_mlp_dim) * double(d_model) : 0.0) +
      3.0 * double(mlp_dim) * double(d_model) +
      4.0 * double(num_heads) * double(std::max(head_dim, global_head_dim)) * double(d_model);
  const double total = double(vocab_size) * double(d_model) + double(num_layers) * per_layer +
                       double(per_layer_vocab) * double(num_layers) * double(per_layer_input_dim);
  constexpr double kMaxParams = double(int64_t(1) << 48);
  if (total > kMaxParams)
    fail("model '", name, "' would have about ", total, " parameters, more than the ", kMaxParams,
         " gemmax can address; check the model's sizes");
}

std::string ModelConfig::shape_difference(const ModelConfig& o) const {
  auto diff = [](const char* key, auto a, auto b) -> std::string {
    return a == b ? std::string() : str_cat(key, ": ", a, " vs ", b);
  };
  const bool moe = has_moe() || o.has_moe();  // two dense models read no MoE sizes
  for (const std::string& d : {
           diff("vocab_size", vocab_size, o.vocab_size),
           diff("base_emb_dim", d_model, o.d_model),
           diff("base_num_decoder_layers", num_layers, o.num_layers),
           diff("base_num_query_heads", num_heads, o.num_heads),
           diff("base_num_kv_heads", num_kv_heads, o.num_kv_heads),
           diff("head_dim", head_dim, o.head_dim),
           diff("global_num_kv_heads", global_num_kv_heads, o.global_num_kv_heads),
           diff("global_head_dim", global_head_dim, o.global_head_dim),
           diff("base_mlp_dim", mlp_dim, o.mlp_dim),
           moe ? diff("base_moe_mlp_dim", moe_mlp_dim, o.moe_mlp_dim) : "",
           diff("num_experts", num_experts, o.num_experts),
           moe ? diff("num_experts_per_tok", num_experts_per_tok, o.num_experts_per_tok) : "",
           diff("sliding_window_size", sliding_window, o.sliding_window),
           diff("global layers (sliding_window_pattern, layer_types)", global_layer_map(*this), global_layer_map(o)),
           diff("local_rope_max_timescale", local_rope_theta, o.local_rope_theta),
           diff("global_rope_max_timescale", global_rope_theta, o.global_rope_theta),
           diff("local_rope_proportion", local_rope_proportion, o.local_rope_proportion),
           diff("global_rope_proportion", global_rope_proportion, o.global_rope_proportion),
           diff("share_kv_projections", share_kv_projections, o.share_kv_projections),
           diff("final_logits_soft_cap", final_logits_soft_cap, o.final_logits_soft_cap),
           diff("normalization_layer_epsilon", norm_eps, o.norm_eps),
           diff("norm_topk_prob", norm_topk_prob, o.norm_topk_prob),
           diff("hidden_size_per_layer_input", per_layer_input_dim, o.per_layer_input_dim),
           diff("vocab_size_per_layer_input", per_layer_vocab, o.per_layer_vocab),
           diff("num_kv_shared_layers", num_kv_shared_layers, o.num_kv_shared_layers),
           diff("use_double_wide_mlp", double_wide_mlp, o.double_wide_mlp)})
    if (!d.empty()) return d;
  return "";
}

}  // namespace gemmax
