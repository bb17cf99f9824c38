#include "gemmax/config/validate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gemmax/base/checked.h"
#include "gemmax/base/error.h"
#include "gemmax/config/run_config.h"

namespace gemmax {
namespace {

// A float key in [lo, hi] (open ends where said); NaN fails every comparison, so it is refused.
void float_in(const Config& c, const char* key, double lo, double hi, bool lo_open, bool hi_open,
              const char* why) {
  const double v = c.get_double(key);
  const bool ok = (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  if (ok) return;
  const std::string range = str_cat(lo_open ? "(" : "[", lo, ", ",
                                    std::isinf(hi) ? std::string("inf") : str_cat(hi),
                                    hi_open ? ")" : "]");
  fail(key, "=", c.value_text(key), " is outside its valid range ", range, ": ", why);
}

void int_in(const Config& c, const char* key, int64_t lo, int64_t hi, const char* why) {
  const int64_t v = c.get_int(key);
  if (v >= lo && v <= hi) return;
  fail(key, "=", v, " is outside its valid range [", lo, ", ", hi, "]: ", why);
}

constexpr double kInf = INFINITY;
constexpr int64_t kI64 = INT64_MAX, kI32 = INT32_MAX;

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

void check_hyperparameters(const Config& c) {
  // Any non-finite float, whatever the key: a NaN or infinity never configures anything.
  const nlohmann::json all = c.to_json();
  for (const auto& [key, value] : all.items())
    if (value.is_number_float() && !std::isfinite(value.get<double>()))
      fail(key, "=", c.value_text(key), " is not a finite number");
  float_in(c, "learning_rate", 0, 1, true, false,
           "the peak rate of AdamW's updates; a negative one climbs the loss, above 1 every "
           "step moves weights by more than their scale");
  const int64_t ns = c.get_int("learning_rate_schedule_steps");
  if (ns != -1 && ns < 1)
    fail("learning_rate_schedule_steps=", ns,
         " is outside its valid range: -1 (equal to steps) or [1, ", kI64, "]");
  float_in(c, "warmup_steps_fraction", 0, 1, false, false,
           "the fraction of the schedule spent warming up");
  float_in(c, "cosine_learning_rate_final_fraction", 0, 1, false, false,
           "the final rate as a fraction of learning_rate; outside [0, 1] the schedule rises "
           "or goes negative");
  float_in(c, "adam_b1", 0, 1, false, true, "Adam's first-moment decay");
  float_in(c, "adam_b2", 0, 1, false, true, "Adam's second-moment decay");
  float_in(c, "adam_eps", 0, kInf, true, true,
           "Adam's denominator term; 0 divides by zero where a gradient is zero");
  float_in(c, "adam_eps_root", 0, kInf, false, true, "added under Adam's square root");
  float_in(c, "adam_weight_decay", 0, 1, false, false,
           "decoupled weight decay; learning_rate x adam_weight_decay above 1 would flip "
           "weights' signs");
  float_in(c, "gradient_clipping_threshold", 0, kInf, false, true,
           "the global-norm clip; 0 disables clipping");
  int_in(c, "steps", 0, kI64, "the number of training steps");
  int_in(c, "checkpoint_period", 0, kI64, "steps between checkpoints; 0: only at the end");
  int_in(c, "max_num_checkpoints_to_keep", 0, kI64, "0 keeps all");
  int_in(c, "log_period", 1, kI64, "steps between console lines");
  int_in(c, "skip_nonfinite_steps", 0, kI64, "non-finite steps a run may skip");
  int_in(c, "sample_max_new_tokens", 0, 1 << 20, "tokens of the closing sample; 0: none");
  int_in(c, "num_threads", 0, 4096, "threads of the host backends; 0: every core");
  int_in(c, "fsdp_prefetch_layers", 0, 1 << 16, "layers gathered ahead");
  int_in(c, "init_weights_seed", 0, kI64, "a seed");
  int_in(c, "data_shuffle_seed", 0, kI64, "a seed");
  int_in(c, "grain_shuffle_buffer_size", 1, kI64, "the shuffle window, in documents");
  float_in(c, "comm_timeout_seconds", 0, kInf, false, true, "0 waits forever");
  float_in(c, "max_memory_gb", 0, kInf, false, true, "0: no limit");
  float_in(c, "peak_tflops_per_device", 0, kInf, false, true, "0: MFU not printed");
}

// Sizes a step derives from the keys, each checked; the limits are those of the int32 index
// tensors (backend/backend.h) and of byte counts.
void check_sizes(const Config& c) {
  const ModelConfig m = model_config_from(c);  // validates each model size on its own
  const int64_t B = c.get_int("per_device_batch_size"), S = c.get_int("max_target_length");
  if (B < 1) fail("per_device_batch_size=", B, " is outside its valid range [1, ", kI32, "]");
  if (S < 1) fail("max_target_length=", S, " is outside its valid range [1, ", kI32, "]");
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

}  // namespace

void validate_run_config(const Config& config) {
  check_hyperparameters(config);
  check_sizes(config);
}

}  // namespace gemmax
