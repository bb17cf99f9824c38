// The Backend interface: the coarse ops the model is written against.
//
// The model (src/gemmax/model) calls these in order; each backend implements them for its device:
// `reference` (plain loops, the ground truth every other backend is tested against), `cpu` (oneDNN
// bf16 matmuls, vectorised fused kernels, OpenMP) and `cuda` (Hopper kernels).
//
// Conventions:
// - Tensors are row-major and contiguous; 2-D shapes are [rows, cols].
// - Activations use the run's activation dtype (float32, float64, or bfloat16); per-row statistics
//   (RMSNorm rstd, attention log-sum-exp, router probabilities and combine weights) use
//   `stat_dtype(activation dtype)`.
// - Mixed precision (bf16 activations, fp32 master weights): matmul inputs share one dtype and
//   products accumulate in fp32 or wider; an output may be wider than the inputs (fp32 weight
//   gradients of bf16 activations: matmul, gmm_drhs, embedding_backward). Small weight vectors
//   (norm scales, per-expert scales, layer_scalar, the embedding table in the lookup) may be wider
//   than the activations and are applied at their own precision before the one rounding of the
//   output; their gradients are written in their own dtype.
// - Integer index tensors (tokens, positions, segment ids, expert ids, sort orders) are int32.
// - "accumulate" means out += result; otherwise out = result.
// - Weight-gradient outputs always accumulate, so that several microbatches (or the two uses of a
//   tied weight) can add into one buffer.
// - No op returns a value to the host: losses, the load-balance term and the gradient norm are
//   added into *device scalars* (float64 tensors of one element, or slots of the step's scalar
//   vector, StepScalars), which the host reads once per step. A backend may run ops asynchronously;
//   only to_host() waits.
// - Reductions run in a fixed order: for a given thread count, results are bit-identical from run
//   to run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gemmax/base/memory.h"
#include "gemmax/base/tensor.h"

namespace gemmax {

// fp64 runs (gradient checks) keep fp64 statistics; everything else keeps fp32.
inline DType stat_dtype(DType activation) {
  return activation == DType::F64 ? DType::F64 : DType::F32;
}

// The scalars of one training step, slots of one float64 device vector [kCount]: the model adds its
// loss sums, the optimizer the gradient's sum of squares, and the host reads the vector once, after
// the update.
struct StepScalars {
  enum : int64_t {
    kCeSum,      // sum over counted targets of the cross-entropy
    kLbSum,      // sum over layers of each layer's weighted load-balance loss
    kGradSumSq,  // sum of squares of the (unclipped) gradient of the trained parameters
    kCount
  };
};

struct AttentionShape {
  int64_t batch = 0, seq = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t window = 0;  // sliding window: key j is visible from query i iff j > i - window; 0: none
};

// The sort of a MoE layer's token copies by expert (docs/TRAINING.md §3). Token copy t*K + k is the
// k-th expert choice of token t.
struct Routing {
  Tensor order;        // int32 [T*K]: sorted row r holds token copy order[r]
  Tensor inverse;      // int32 [T*K]: inverse[order[r]] == r
  Tensor token;        // int32 [T*K]: order[r] / K, the token of sorted row r
  Tensor group_sizes;  // int32 [E]: rows of each expert; expert g owns a contiguous row range
};

// Where the sorted rows of a grouped matmul live (all optional). A grouped matmul works on rows
// sorted by expert; with these maps its operands stay in token order and the permute and un-permute
// around it fold into its row loads and stores (seed Part 2):
// - `in`: int32 [m]: sorted row r of the forward's input side (gmm's lhs, gmm_dlhs's output,
//   gmm_drhs's lhs) is row in[r] of that tensor;
// - `out`: int32 [m]: sorted row r of the forward's output side (gmm's out, gmm_dlhs's and
//   gmm_drhs's dout) is row out[r] of that tensor. An undefined map is the identity. `in` may
//   repeat rows (a gather from the [T, D] tokens); a map that writes (gmm's `out`, gmm_dlhs's `in`)
//   must be a permutation. `weight_begin`, `weight_rows` select rows [begin, begin + rows) of each
//   group's [n, k] weight (the gate or the up half of a fused gate_up weight; -1: all rows).
struct GmmRows {
  Tensor in, out;
  int64_t weight_begin = 0, weight_rows = -1;
  bool accumulate = false;  // gmm and gmm_dlhs: add into the output
};

struct AdamWStep {
  double lr = 0, b1 = 0.9, b2 = 0.95, eps = 1e-8, eps_root = 0, weight_decay = 0;
  double clip_norm = 0;  // global-norm clipping threshold on sqrt(scalars[kGradSumSq]); 0: off
  int64_t t = 1;         // 1-based step count for bias correction
};

class Backend {
 public:
  virtual ~Backend() = default;
  // "reference", "cpu", ...; `describe` adds what the backend chose (threads, ISA paths).
  virtual std::string name() const = 0;
  virtual std::string describe() const { return name(); }

  // ---- memory --------------------------------------------------------------------------- Every
  // allocation is counted in tracker(): the process-wide tracker, or a planning run's.
  virtual Tensor alloc(const Shape& shape, DType dtype, MemKind kind) = 0;  // uninitialised
  Tensor zeros(const Shape& shape, DType dtype, MemKind kind) {
    Tensor t = alloc(shape, dtype, kind);
    fill(t, 0.0);
    return t;
  }
  // Host <-> device copies. upload copies a host tensor into a device tensor of the same dtype and
  // size; to_host returns the tensor's contents on the host (the tensor itself on host backends)
  // and waits for every op issued before it: it is the one synchronisation point of a step.
  virtual void upload(const Tensor& dst, const Tensor& host) = 0;
  virtual Tensor to_host(const Tensor& t) = 0;
  // Waits for every op issued so far (a no-op on backends whose ops are synchronous).
  virtual void synchronize() {}
  Tensor to_device(const Tensor& host, MemKind kind) {
    Tensor t = alloc(host.shape(), host.dtype(), kind);
    upload(t, host);
    return t;
  }
  virtual MemoryTracker& tracker() { return MemoryTracker::global(); }
  // Memory the backend holds for its whole life (kernel scratch), allocated through alloc() when
  // it is built; a memory plan counts it as workspace (backend/planning_backend.h).
  virtual int64_t persistent_bytes() const { return 0; }

  // ---- elementwise and reductions ----------------------------------------------------------
  virtual void fill(const Tensor& x, double value) = 0;
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;                // converts dtype
  virtual void add(const Tensor& out, const Tensor& a, const Tensor& b) = 0;  // out = a + b
  virtual void axpy(const Tensor& y, double alpha, const Tensor& x) = 0;      // y += alpha x
  virtual void scale(const Tensor& x, double alpha) = 0;                      // x *= alpha
  // sum[0] += sum_i x_i^2, in fp64 (sum: a float64 device scalar).
  virtual void sum_squares(const Tensor& sum, const Tensor& x) = 0;
  // y = (a + b) * s[0], s a device scalar (layer_scalar: in its own dtype, applied before the one
  // rounding of y).
  virtual void scaled_sum_forward(const Tensor& y, const Tensor& a, const Tensor& b,
                                  const Tensor& s) = 0;
  // dab = dy * s[0]; ds[0] += sum_i dy_i (a_i + b_i) (ds in s's dtype).
  virtual void scaled_sum_backward(const Tensor& dab, const Tensor& ds, const Tensor& dy,
                                   const Tensor& a, const Tensor& b, const Tensor& s) = 0;
  // out[g] = in[g]^T for in [G, r, c], out [G, c, r].
  virtual void transpose_groups(const Tensor& out, const Tensor& in) = 0;

  // ---- matmul: c = op(a) . op(b) (+ c), op(x) = x^T when trans. 2-D, fp32/fp64 accumulation.
  virtual void matmul(const Tensor& c, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                      bool accumulate) = 0;

  // ---- embedding: x[t] = table[tokens[t]] * scale;  dtable[tokens[t]] += dx[t] * scale
  virtual void embedding_forward(const Tensor& x, const Tensor& tokens, const Tensor& table,
                                 double scale) = 0;
  virtual void embedding_backward(const Tensor& dtable, const Tensor& dx, const Tensor& tokens,
                                  double scale) = 0;

  // ---- RMSNorm over the last dimension ------------------------------------------------------ y =
  // [residual +] x * rstd * w * out_scale with rstd = (mean(x^2) + eps)^-1/2 computed and saved per
  // row. `w` may be undefined (the scale-free norm); `residual` may be undefined. The scale is
  // multiplied in fp32 before the one rounding to y's dtype (seed change 2), or, with
  // round_before_scale, x * rstd is first rounded to y's dtype and multiplied by w rounded to y's
  // dtype in that dtype (MaxText before that change; bf16 runs only differ).
  virtual void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x,
                               const Tensor& w, double eps, double out_scale,
                               const Tensor& residual, bool round_before_scale) = 0;
  // dx (+)= rstd * (g - xhat * mean(g * xhat)), g = dy * w * out_scale; dw += sum_rows
  // dy*xhat*out_scale
  virtual void rmsnorm_backward(const Tensor& dx, const Tensor& dw, const Tensor& dy,
                                const Tensor& x, const Tensor& w, const Tensor& rstd,
                                double out_scale, bool accumulate_dx) = 0;

  // ---- RoPE, split-half ---------------------------------------------------------------------
  // table [T, hd/2, 2] (stat dtype) = cos and sin of positions[t] * inv_freq[i] (inv_freq:
  // fp64 [hd/2], zeros for dimensions that do not rotate): computed once per step and kind of
  // layer, then read by every rotation.
  virtual void rope_table(const Tensor& table, const Tensor& positions,
                          const Tensor& inv_freq) = 0;
  // In place on x [T, heads, hd]: pair (i, i + hd/2) of token t rotates by the table's angle
  // (t, i). inverse = true rotates back: that is the backward.
  virtual void rope(const Tensor& x, const Tensor& table, bool inverse) = 0;

  // ---- attention: causal, GQA, optional sliding window, segment mask, scale 1.0 ------------
  // q, o [B*S, H, hd]; k, v [B*S, KV, hd]; lse [B, H, S] (stat dtype); segment_ids int32 [B*S].
  virtual void attention_forward(const Tensor& o, const Tensor& lse, const Tensor& q,
                                 const Tensor& k, const Tensor& v, const Tensor& segment_ids,
                                 const AttentionShape& shape) = 0;
  // Writes dq, dk, dv (no accumulation).
  virtual void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                  const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& o, const Tensor& lse,
                                  const Tensor& segment_ids, const AttentionShape& shape) = 0;
  // Attention of new tokens over a KV cache (incremental decoding; model/decode.h). q, o
  // [n, H, hd] are the new tokens at positions q_pos (int32 [n]). k, v [C, KV, hd] are cache
  // slots in any order; slot c holds position kv_pos[c] (int32 [C]; -1: empty). Query i sees
  // slot c iff 0 <= kv_pos[c] <= q_pos[i] and (window == 0 or kv_pos[c] > q_pos[i] - window):
  // the same mask as attention_forward on one segment, so the two agree to rounding. Every
  // query must see at least one slot (its own key, written before the call).
  virtual void attention_decode(const Tensor& o, const Tensor& q, const Tensor& q_pos,
                                const Tensor& k, const Tensor& v, const Tensor& kv_pos,
                                int64_t window) = 0;

  // ---- GeGLU: a = gelu_tanh(gate) * up [m, F] ------------------------------------------------
  // Fused rows: h = [gate | up] [m, 2F] (up undefined), or the two halves in separate tensors h =
  // gate [m, F] and up [m, F].
  virtual void geglu_forward(const Tensor& a, const Tensor& h, const Tensor& up) = 0;
  // Gradients into dh (fused [m, 2F], dup undefined) or into the halves dh = dgate and dup; either
  // half may be undefined (not needed), and is then not written.
  virtual void geglu_backward(const Tensor& dh, const Tensor& dup, const Tensor& da,
                              const Tensor& h, const Tensor& up) = 0;

  // ---- router (docs/TRAINING.md §2, §6) -----------------------------------------------------
  // probs = softmax(logits) [T, E]; idx [T, K] = top-k of logits (ties: lower id first); weights
  // [T, K] = probs[idx] (/ their sum if renormalize) * per_expert_scale[idx].
  virtual void router_forward(const Tensor& probs, const Tensor& idx, const Tensor& weights,
                              const Tensor& logits, const Tensor& per_expert_scale,
                              bool renormalize) = 0;
  // dlogits = softmax backward of dp, where dp comes from dweights through the renormalisation
  // and the per-expert scale, plus lb_dprobs[b, e] for every token of sequence b (load-balance
  // gradient; may be undefined). dper_expert_scale accumulates.
  virtual void router_backward(const Tensor& dlogits, const Tensor& dper_expert_scale,
                               const Tensor& dweights, const Tensor& probs, const Tensor& idx,
                               const Tensor& per_expert_scale, bool renormalize,
                               const Tensor& lb_dprobs, int64_t seq) = 0;
  // density [B, E] = fraction of sequence b's tokens that chose expert e; loss[0] += coefficient *
  // mean_{b,e}(density * mean_s probs) (docs/TRAINING.md §7; coefficient = weight * E^2). loss: a
  // float64 device scalar, or undefined (density only).
  virtual void load_balance_forward(const Tensor& density, const Tensor& loss, const Tensor& probs,
                                    const Tensor& idx, int64_t seq, double coefficient) = 0;

  // ---- dispatch (docs/TRAINING.md §3, §6) -----------------------------------------------------
  // Stable sort of the token copies in idx [T, K] by expert, into the caller's int32 tensors
  // routing.order, .inverse, .token [T*K] and .group_sizes [E].
  virtual void route_sort(const Routing& routing, const Tensor& idx, int64_t num_experts) = 0;
  // xs[r] = x[order[r] / k]
  virtual void permute(const Tensor& xs, const Tensor& x, const Tensor& order, int64_t k) = 0;
  // dx[t] (+)= sum_j dxs[inverse[t*k + j]]; inverse undefined: dxs is in token order (dx[t] (+)=
  // sum_j dxs[t*k + j]).
  virtual void permute_backward(const Tensor& dx, const Tensor& dxs, const Tensor& inverse,
                                int64_t k, bool accumulate) = 0;
  // m[t] = sum_j weights[t, j] * y[inverse[t*K + j]], summed in fp32 (fp64 for fp64 runs); inverse
  // undefined: y is in token order (y[t*K + j]).
  virtual void combine_forward(const Tensor& m, const Tensor& y, const Tensor& inverse,
                               const Tensor& weights) = 0;
  // dy[r] = weights[order[r]] * dm[order[r] / K]; dweights[order[r]] = dm[order[r] / K] . y[r];
  // order undefined: y and dy are in token order (order[r] = r).
  virtual void combine_backward(const Tensor& dy, const Tensor& dweights, const Tensor& dm,
                                const Tensor& y, const Tensor& order, const Tensor& weights) = 0;

  // ---- grouped matmul over contiguous row groups (docs/TRAINING.md §4, §5) -------------------
  // rhs [G, n, k] is in the Hugging Face [out, in] layout of each expert; `rows` places the sorted
  // rows (GmmRows above); m = sum of group_sizes. out[r] (+)= lhs[r] . rhs[g(r)]^T (lhs [m, k], out
  // [m, n])
  virtual void gmm(const Tensor& out, const Tensor& lhs, const Tensor& rhs,
                   const Tensor& group_sizes, const GmmRows& rows) = 0;
  // dlhs[r] (+)= dout[r] . rhs[g(r)] (reads rhs in place; no transposed copy)
  virtual void gmm_dlhs(const Tensor& dlhs, const Tensor& dout, const Tensor& rhs,
                        const Tensor& group_sizes, const GmmRows& rows) = 0;
  // drhs[g] += dout[rows of g]^T . lhs[rows of g]; a group with no rows adds nothing
  virtual void gmm_drhs(const Tensor& drhs, const Tensor& lhs, const Tensor& dout,
                        const Tensor& group_sizes, const GmmRows& rows) = 0;

  // ---- output head loss on a tile of rows ------------------------------------------------ logits
  // [C, V] holds z = y . Emb^T. With c = cap * tanh(z / cap) (cap 0: c = z), loss[0] += sum over
  // rows with mask != 0 of logsumexp(c) - c[target] (loss: a float64 device scalar). On return
  // logits holds c, or, if write_grad, dz = grad_scale * [mask != 0] * (softmax(c) -
  // onehot(target)) * (1 - (c / cap)^2).
  virtual void softcap_cross_entropy(const Tensor& logits, const Tensor& loss,
                                     const Tensor& targets, const Tensor& mask, double cap,
                                     double grad_scale, bool write_grad) = 0;

  // ---- output head loss with the vocabulary split over ranks (parallel/vocab_parallel.h) ----------
  // logits [R, Vl] hold this rank's columns of the vocabulary for R rows; targets (int32 [R]) hold
  // each row's target column on this rank, or -1 (another rank's column); stats is float64 [3, R]:
  // row max, sum of exponentials, target logit. Between the passes the caller combines the stats
  // over the ranks: the max of stats[0] after pass 1, the sums of stats[1] and stats[2] after
  // pass 2. The three passes give softcap_cross_entropy's loss and gradient.
  // Pass 1: logits <- c = cap tanh(z / cap) (cap 0: z), in place; stats[0][r] = max_v c[r, v].
  virtual void vocab_ce_max(const Tensor& logits, const Tensor& stats, double cap);
  // Pass 2: stats[1][r] = sum_v exp(c[r, v] - stats[0][r]); stats[2][r] = c[r, targets[r]], or 0.
  virtual void vocab_ce_sums(const Tensor& logits, const Tensor& stats, const Tensor& targets);
  // Pass 3: with lse = stats[0] + log(stats[1]): loss[0] += sum over rows r in [loss_begin,
  // loss_end) with mask != 0 of lse[r] - stats[2][r]; if write_grad, logits <- dz = grad_scale
  // [mask != 0] (exp(c - lse) - [v == targets[r]]) (1 - (c / cap)^2).
  // The defaults fail: a backend without them trains FSDP with fsdp_embedding=gather.
  virtual void vocab_ce_finish(const Tensor& logits, const Tensor& loss, const Tensor& stats,
                               const Tensor& targets, const Tensor& mask, double cap,
                               double grad_scale, int64_t loss_begin, int64_t loss_end,
                               bool write_grad);

  // ---- optimizer on flat buffers ------------------------------------------------------------
  // AdamW with the gradient scaled by min(1, clip_norm / sqrt(scalars[kGradSumSq])). The update is
  // skipped (param, m, v unchanged) unless every slot of `scalars` (the step's StepScalars) is
  // finite: a non-finite loss or gradient never reaches the weights.
  virtual void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                          const AdamWStep& step, const Tensor& scalars) = 0;
};

// The clipping factor of AdamW: min(1, clip_norm / norm) (1 when clip_norm is 0).
inline double clip_factor(double clip_norm, double norm) {
  return clip_norm > 0 && norm > clip_norm ? clip_norm / norm : 1.0;
}

}  // namespace gemmax
