// The adapter's share of a linear layer (docs/LORA.md): for y = x . W^T on a frozen W,
//   y += s (drop(x) . A^T) . B^T,
// as Hugging Face PEFT's lora.Linear computes it (s = lora_alpha / r, or / sqrt(r) with rsLoRA;
// drop: nn.Dropout on the adapter's input). The products are the model's own ops at rank r: the
// dense matmul, or the grouped matmul over one adapter per expert (PEFT's ParamWrapper on the
// experts' 3-D weights, which allows no dropout). Forward and backward side by side.
//
// The forward keeps xa = s drop(x) . A^T [rows, r], all the backward needs besides x; the
// backward computes only the adapter's gradients and its share of dx (the frozen W has none).
#pragma once

#include <initializer_list>

#include "gemmax/model/context.h"
#include "gemmax/model/weights.h"

namespace gemmax {

// y += s (drop(x) . A^T) . B^T; xa (allocated here, of ActClass::Matmul) = s drop(x) . A^T.
void lora_forward(const LayerContext& ctx, const LoraPair& w, const Tensor& x, const Tensor& y,
                  Tensor& xa);
// With u = s dy . B: g.b += dy^T . xa, g.a += u^T . drop(x), dx += drop(u . A). dx already holds
// the frozen matrix's dlhs.
void lora_backward(const LayerContext& ctx, const LoraPair& w, const LoraPair& g, const Tensor& x,
                   const Tensor& xa, const Tensor& dy, const Tensor& dx);

// The two halves, for an adapter whose B feeds several outputs (per_layer_model_projection: each
// layer's rows of B): xa = s drop(x) . A^T; and from u = s dy . B, summed over the outputs by the
// caller: g.a += u^T . drop(x), dx += drop(u . A).
void lora_in(const LayerContext& ctx, const LoraPair& w, const Tensor& x, Tensor& xa);
void lora_in_backward(const LayerContext& ctx, const LoraPair& w, const LoraPair& g,
                      const Tensor& x, const Tensor& u, const Tensor& dx);

// The grouped form, over token copies sorted by expert (model/moe.cc). x, dx, y and dy are placed
// by the frozen products' GmmRows maps; xa is in sorted order. No dropout (PEFT has none there). An
// output may take a window of each expert's B (the gate or the up half of gate_up's adapter, when
// the two halves are separate products): rows [b_begin, b_begin + b_rows), -1 for all.
struct LoraGroupedInput {
  const Tensor& x;            // the frozen product's input
  const Tensor& group_sizes;  // int32 [E]
  // Where sorted row r of x, of dx, and of y (and dy) lives (GmmRows' maps); undefined: row r.
  Tensor x_rows, dx_rows, y_rows;
};
struct LoraGroupedOutput {
  const Tensor& y;  // y in the forward, dy in the backward
  int64_t b_begin = 0, b_rows = -1;
};
void lora_grouped_forward(const LayerContext& ctx, const LoraPair& w, const LoraGroupedInput& in,
                          std::initializer_list<LoraGroupedOutput> ys, Tensor& xa);
// u = s sum over outputs of dy . B[window] is formed before A's products.
void lora_grouped_backward(const LayerContext& ctx, const LoraPair& w, const LoraPair& g,
                           const LoraGroupedInput& in, const Tensor& xa,
                           std::initializer_list<LoraGroupedOutput> dys, const Tensor& dx);

}  // namespace gemmax
