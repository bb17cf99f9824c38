#include "gemmax/config/validate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gemmax/base/checked.h"
#include "gemmax/base/error.h"
#include "gemmax/config/key_table.h"
#include "gemmax/config/run_config.h"

namespace gemmax {
namespace {

constexpr int64_t kI32 = INT32_MAX;

// A product of keys, named by its factors if it overflows.
struct Factor {
  std::string name;
  int64_t value;
};
int64_t product(const std::vector<Factor>& fs) {
  std::string what;
  for (const Factor& f : fs) what += (what.empty() ? "" : " x ") + f.name;
  int64_t r = 1;
  for (const Factor& f : fs) r = checked_mul(r, f.value, what);
  return r;
}

// Any non-finite float, whatever the key: a NaN or infinity never configures anything. Then each
// key's range (keys.h); NaN fails every comparison, so it is refused too.
void check_ranges(const Config& c) {
  const nlohmann::json all = c.to_json();
  for (const auto& [key, value] : all.items())
    if (value.is_number_float() && !std::isfinite(value.get<double>()))
      fail(key, "=", c.value_text(key), " is not a finite number");
  for (const KeySpec& k : key_specs()) {
    if (!k.range.checked) continue;
    const bool integer = k.type == "int";
    const double v = integer ? double(c.get_int(std::string(k.key))) : c.get_double(std::string(k.key));
    if (k.range.contains(v)) continue;
    fail(k.key, "=", c.value_text(std::string(k.key)), " is outside its valid range ",
         k.range.text(integer), ": ", k.help);
  }
}

// Sizes a step derives from the keys, each checked; the limits are those of the int32 index
// tensors (backend/backend.h) and of byte counts.
void check_sizes(const Config& c) {
  const ModelConfig m = model_config_from(c);  // validates each model size on its own
  const int64_t B = c.get_int("per_device_batch_size"), S = c.get_int("max_target_length");
  const Factor b{"per_device_batch_size", B}, s{"max_target_length", S};
  const Factor k{"num_experts_per_tok", m.num_experts_per_tok}, d{"base_emb_dim", m.d_model};
  const Factor v{"vocab_size", m.vocab_size}, h{"base_num_query_heads", m.num_heads};
  const Factor e{"num_experts", m.num_experts}, f{"base_moe_mlp_dim", m.moe_mlp_dim};
  const Factor fd{"base_mlp_dim", m.mlp_dim}, two{"2", 2}, bytes{"8 bytes", 8};
  // Token copies routed to experts are indexed by int32 (sort orders, row maps).
  if (const int64_t copies = product({b, s, k}); copies > kI32)
    fail("per_device_batch_size x max_target_length x num_experts_per_tok = ", B, " x ", S,
         " x ", m.num_experts_per_tok, " = ", copies, " token copies per step, more than the ",
         kI32, " that int32 indices address; lower per_device_batch_size or max_target_length");
  const int64_t hd = std::max(m.head_dim, m.global_head_dim);
  const Factor hdim{"max(head_dim, global_head_dim)", hd};
  // The largest tensors of a step and of the model, in bytes of the widest dtype.
  product({b, s, d, bytes});
  product({b, s, h, hdim, bytes});
  product({b, s, k, two, f, bytes});
  product({b, s, two, fd, bytes});
  product({b, s, v, bytes});  // one tile of logits is at most this
  product({e, two, f, d, bytes});
  product({v, d, bytes});
  const int64_t per_layer = checked_add(product({e, two, f, d}), product({two, fd, d}),
                                        "the parameters of one layer");
  product({{"base_num_decoder_layers", m.num_layers}, {"(parameters per layer)", per_layer},
           {"8 bytes x 4 (weights, gradients, two moments)", 32}});
}

// Keys that mean something only with another.
void check_combinations(const Config& c) {
  if (c.get_double("target_eval_loss") > 0 && c.get_int("eval_interval") == -1)
    fail("target_eval_loss=", c.value_text("target_eval_loss"),
         " stops a run on its evaluation, but eval_interval=-1 evaluates nothing: set "
         "eval_interval to a number of steps, or target_eval_loss=0");
}

}  // namespace

void validate_run_config(const Config& config) {
  check_ranges(config);
  check_combinations(config);
  check_sizes(config);
}

}  // namespace gemmax
