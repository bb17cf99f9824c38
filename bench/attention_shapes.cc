// The cpu backend's attention, forward and backward, on gemma4-e2b's two shapes at batch 1 x
// 2048 (8 query heads on 1 kv head: sliding layers head_dim 256, window 512; global layers
// head_dim 512, causal), bf16: milliseconds a call and GFLOP/s of the visible (causal,
// windowed) score pairs, forward 4 and backward 10 FLOPs per pair and head dimension. Each
// figure is the best of `rounds` runs of at least 0.1 s (base/timer.h's best_rate).
//
//   build/bin/attention_shapes [threads] [rounds] [seq]
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/base/timer.h"

using namespace gemmax;

int main(int argc, char** argv) {
  BackendOptions options;
  options.num_threads = argc > 1 ? std::atoi(argv[1]) : 0;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  const int64_t S = argc > 3 ? std::atoll(argv[3]) : 2048;
  auto be = make_backend(options);
  std::printf("%s, batch 1 x %lld, 8 heads on 1 kv head, bf16\n", be->describe().c_str(),
              (long long)S);
  std::printf("%-28s %10s %10s %10s %10s\n", "shape", "fwd ms", "GFLOP/s", "bwd ms", "GFLOP/s");
  struct Case {
    const char* what;
    int64_t head_dim, window;
  };
  for (const Case c : {Case{"sliding: head_dim 256, w 512", 256, 512},
                       Case{"global: head_dim 512, causal", 512, 0}}) {
    const int64_t B = 1, H = 8, KV = 1, hd = c.head_dim;
    auto filled = [&](int64_t heads) {
      Tensor h = Tensor::empty({B * S, heads, hd}, DType::BF16);
      bf16* p = h.data<bf16>();
      for (int64_t i = 0; i < h.numel(); ++i) p[i] = bf16(float((i * 37 % 200) - 100) / 400.0f);
      return be->to_device(h, MemKind::Workspace);
    };
    const Tensor q = filled(H), k = filled(KV), v = filled(KV), o = filled(H), dout = filled(H);
    const Tensor dq = filled(H), dk = filled(KV), dv = filled(KV);
    const Tensor lse = be->alloc({B, H, S}, DType::F32, MemKind::Workspace);
    const Tensor seg = be->zeros({B * S}, DType::I32, MemKind::Workspace);
    const AttentionShape shape{.batch = B,
                               .seq = S,
                               .num_heads = H,
                               .num_kv_heads = KV,
                               .head_dim = hd,
                               .window = c.window};
    double pairs = 0;
    for (int64_t i = 0; i < S; ++i) pairs += double(c.window ? std::min(i + 1, c.window) : i + 1);
    // Seconds a call: the inverse of the best rate in calls per second.
    const double fwd =
        1 /
        best_rate(
            1,
            [&] {
              be->attention_forward(
                  {.o = o, .lse = lse, .q = q, .k = k, .v = v, .segment_ids = seg, .shape = shape});
            },
            rounds);
    const double bwd = 1 / best_rate(
                               1,
                               [&] {
                                 be->attention_backward({.dq = dq,
                                                         .dk = dk,
                                                         .dv = dv,
                                                         .dout = dout,
                                                         .q = q,
                                                         .k = k,
                                                         .v = v,
                                                         .o = o,
                                                         .lse = lse,
                                                         .segment_ids = seg,
                                                         .shape = shape});
                               },
                               rounds);
    const double per_pair = double(hd * H * B) * pairs;
    std::printf("%-28s %10.2f %10.0f %10.2f %10.0f\n", c.what, fwd * 1e3, 4 * per_pair / fwd / 1e9,
                bwd * 1e3, 10 * per_pair / bwd / 1e9);
  }
  return 0;
}
