// gemmax bench --attention: attention's forward and backward alone, at the model's two kinds of
// layer (sliding and global), on the configured backend; bench/gpu_check.sh runs it once per
// cuda_attention path, side by side.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gemmax/backend/backend.h"
#include "gemmax/config/model_config.h"
#include "gemmax/model/context.h"

namespace gemmax {

struct AttentionFigures {
  std::string what;  // "sliding" or "global"
  int64_t head_dim = 0, heads = 0, kv_heads = 0, window = 0;
  double forward_tflops = 0, backward_tflops = 0;
};

// FLOPs of one attention forward: q.k and p.v over the visible (causal, windowed) pairs. The
// backward is counted as 2.5 forwards (the scores again, then dp, dv, dq and dk).
double attention_forward_flops(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                               int64_t window);

// One segment per row (cuDNN's path takes it); rates are the best of a few timed runs.
std::vector<AttentionFigures> attention_rates(Backend& be, const ModelConfig& c,
                                              const ModelOptions& options, int64_t batch,
                                              int64_t seq);

// Prints the rates (and writes them to json_path, when given): what `gemmax bench --attention`
// does.
int print_attention_rates(Backend& be, const ModelConfig& c, const ModelOptions& options,
                          int64_t batch, int64_t seq, const std::string& json_path);

}  // namespace gemmax
