// cuDNN's fused attention (SDPA) for cuda_attention=cudnn, the host half: which calls cuDNN
// takes, and the graph that describes one (dims, strides, mask, scale), worked out from the op's
// shape by pure functions so that the CPU tests check them without a GPU or the library.
// cudnn_attention.h builds and runs the graphs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>

#include "gemmax/backend/cuda/kernels/attention_tiles.h"

namespace gemmax::cuda {

// A tensor as cuDNN's graph sees it: dims [B, H, S, D] (the stats: [B, H, S, 1]) and element
// strides over the op's own layout, so that nothing is copied or transposed.
struct SdpaTensor {
  std::array<int64_t, 4> dim{}, stride{};
  bool operator==(const SdpaTensor&) const = default;
};

// One cuDNN SDPA graph. q, o (and dq, dout) are [B*S, H, hd]; k, v (and dk, dv) [B*S, KV, hd];
// stats is the op's lse [B, H, S] in fp32: cuDNN's "Stats" is the natural-log logsumexp of each
// score row, the value the mma kernels write and read.
struct SdpaPlan {
  int64_t batch = 0, heads = 0, kv_heads = 0, seq = 0, head_dim = 0;
  SdpaTensor q, k, v, o, stats;
  float scale = 1.0f;  // Gemma-4: q is RMS-normed, scores are not scaled (the reference's 1.0)
  // Causal with the diagonal at the top left (query i sees keys j <= i); with left_bound > 0
  // also j > i - left_bound (cuDNN keeps j + left_bound > i): the op's sliding window, one for
  // one. 0: no window (none asked, or one at least as long as the sequence).
  int64_t left_bound = 0;
  // The graph cache's key: everything above is a function of it.
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
  Key key() const { return {batch, heads, kv_heads, seq, head_dim, left_bound}; }
  bool operator==(const SdpaPlan&) const = default;
};

// What the op knows beyond the dims: whether every row holds one segment (StepInputs::
// one_segment, checked on the host at upload) and whether every operand is 16-byte aligned.
struct SdpaCall {
  bool bf16 = true;
  bool one_segment = false;
  bool aligned = true;
};

// cuDNN's graph for a call, or why cuDNN does not take it (the call then runs the kernels).
struct SdpaChoice {
  std::optional<SdpaPlan> plan;
  std::string shape_class;  // [head_dim=..., ...]: the slow-path note's key
  std::string why;          // set when plan is empty
};

// The head size cuDNN runs here: the sliding layers' 256 (the global layers' 512 goes to the
// kernels: cuDNN 9.19's backward on Hopper stops at 256).
inline constexpr int64_t kCudnnHeadDim = 256;

SdpaChoice choose_cudnn_attention(const kern::AttnDims& d, const SdpaCall& call);

// cuDNN's workspace for a graph: the backend's shared workspace (cuBLASLt's, stream-ordered)
// when `need` fits in its `shared` bytes, else a block of the returned size held by the platform
// (rounded up to 2 MiB so that a slightly larger graph reuses it). Fails on a negative size or
// one over `limit` bytes, naming both.
size_t cudnn_workspace_block(int64_t need, size_t shared, size_t limit);

}  // namespace gemmax::cuda
