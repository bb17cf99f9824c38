// The embedding lookup and its gradient (tokens sorted by id, no atomics).
#pragma once

#include "gemmax/backend/cuda/ops/elementwise_ops.h"

namespace gemmax::cuda::ops {

template <class P>
void embedding_forward(P& p, const EmbeddingForwardArgs& args, NoDims) {
  const auto& [x, tokens, table, scale] = args;
  const int64_t n = tokens.numel(), vocab = table.dim(0), d = table.dim(1);
  if (n == 0) return;
  dispatch<float, bf16>(x, "embedding_forward", [&]<class E>() {
    dispatch<float, bf16, double>(table, "embedding_forward", [&]<class W>() {
      p.template launch<kern::EmbeddingForwardKernel>(
          stride_launch(n * 256, 256, 65535), ptr<E>(x),
          const_cast<const int32_t*>(ptr<int32_t>(tokens)), const_cast<const W*>(ptr<W>(table)), n,
          d, vocab, scale, p.errors(), vec_ok<E>(d, {&x, &table}));
    });
  });
}

template <class P>
void embedding_backward(P& p, const EmbeddingBackwardArgs& args, NoDims) {
  const auto& [dtable, dx, tokens, scale] = args;
  const int64_t n = tokens.numel(), vocab = dtable.dim(0), d = dtable.dim(1);
  if (n == 0) return;
  static_assert(kern::kMaxBins == 512, "radix passes of 9 bits");
  int bits = 1;
  while ((int64_t(1) << bits) < vocab) ++bits;
  Scratch s = p.scratch();
  int32_t* sorted = s.take<int32_t>(n, "the tokens sorted by id");
  const int32_t* perm = stable_sort(p, s, ptr<int32_t>(tokens), n, kern::kMaxBins, true,
                                    (bits + 8) / 9, sorted, nullptr);
  dispatch<float, bf16, double>(dtable, "embedding_backward", [&]<class W>() {
    dispatch<float, bf16>(dx, "embedding_backward", [&]<class E>() {
      p.template launch<kern::EmbeddingBackwardKernel>(
          stride_launch(n * 256, 256, 65535), ptr<W>(dtable), const_cast<const E*>(ptr<E>(dx)),
          const_cast<const int32_t*>(ptr<int32_t>(tokens)), perm, n, d, vocab, scale,
          vec_ok<E>(d, {&dtable, &dx}));
    });
  });
}

}  // namespace gemmax::cuda::ops
