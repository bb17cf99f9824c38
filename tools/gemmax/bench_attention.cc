#include "bench_attention.h"

#include <algorithm>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gemmax/base/convert.h"
#include "gemmax/base/rng.h"
#include "gemmax/base/timer.h"
#include "gemmax/io/atomic_file.h"

namespace gemmax {

double attention_forward_flops(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                               int64_t window) {
  const int64_t w = window > 0 ? std::min(window, seq) : seq;
  // Query i sees min(i + 1, w) keys.
  const double pairs = double(w) * double(w + 1) / 2 + double(seq - w) * double(w);
  return 4.0 * double(head_dim) * pairs * double(heads) * double(batch);
}

namespace {

// Normal values, drawn once into a pool and strided through it: the global layers' operands
// hold hundreds of millions of values, and drawing each would take longer than the timing.
Tensor random_bf16(Backend& be, const Shape& s, Rng& rng, double scale) {
  constexpr int64_t kPool = int64_t(1) << 20;
  std::vector<bf16> pool(kPool);
  for (bf16& x : pool) x = bf16(float(scale * rng.normal()));
  Tensor host = Tensor::empty(s, DType::BF16);
  bf16* h = host.data<bf16>();
  for (int64_t i = 0; i < host.numel(); ++i) h[i] = pool[size_t((i * 7919) % kPool)];
  return be.to_device(host, MemKind::Workspace);
}

// The best time of f over 3 runs of at least 0.1 s (one untimed run first).
double best_seconds(Backend& be, const std::function<void()>& f) {
  f();
  be.synchronize();
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    Timer t;
    int n = 0;
    do {
      f();
      be.synchronize();
      ++n;
    } while (t.seconds() < 0.1);
    best = std::min(best, t.seconds() / n);
  }
  return best;
}

}  // namespace

std::vector<AttentionFigures> attention_rates(Backend& be, const ModelConfig& c,
                                              const ModelOptions& options, int64_t batch,
                                              int64_t seq) {
  std::vector<AttentionFigures> out;
  Rng rng(5);
  const int64_t T = batch * seq;
  Tensor seg_host = Tensor::empty({T}, DType::I32);
  std::fill_n(seg_host.data<int32_t>(), T, 1);
  const Tensor seg = be.to_device(seg_host, MemKind::Workspace);
  for (bool global : {false, true}) {
    int64_t layer = 0;
    while (layer < c.num_layers && c.is_global(layer) != global) ++layer;
    if (layer == c.num_layers) continue;  // no layer of this kind
    const int64_t H = c.num_heads, KV = c.layer_kv_heads(layer), hd = c.layer_head_dim(layer);
    const int64_t window = global ? 0 : c.sliding_window;
    AttentionShape s{batch, seq, H, KV, hd, window,
                     options.attention_bf16_scores || options.attention_bf16_softmax,
                     options.attention_bf16_softmax};
    s.one_segment = true;
    const Tensor q = random_bf16(be, {T, H, hd}, rng, 0.7), k = random_bf16(be, {T, KV, hd}, rng, 0.7),
                 v = random_bf16(be, {T, KV, hd}, rng, 1.0), dout = random_bf16(be, {T, H, hd}, rng, 1.0);
    const Tensor o = be.alloc({T, H, hd}, DType::BF16, MemKind::Workspace);
    const Tensor lse = be.alloc({batch, H, seq}, DType::F32, MemKind::Workspace);
    const Tensor dq = be.alloc({T, H, hd}, DType::BF16, MemKind::Workspace);
    const Tensor dk = be.alloc({T, KV, hd}, DType::BF16, MemKind::Workspace);
    const Tensor dv = be.alloc({T, KV, hd}, DType::BF16, MemKind::Workspace);
    const double flops = attention_forward_flops(batch, seq, H, hd, window);
    const double fwd = best_seconds(be, [&] {
      be.attention_forward({.o = o, .lse = lse, .q = q, .k = k, .v = v, .segment_ids = seg, .shape = s});
    });
    const double bwd = best_seconds(be, [&] {
      be.attention_backward({.dq = dq, .dk = dk, .dv = dv, .dout = dout, .q = q, .k = k, .v = v,
                             .o = o, .lse = lse, .segment_ids = seg, .shape = s});
    });
    out.push_back({global ? "global" : "sliding", hd, H, KV, window, flops / fwd / 1e12,
                   2.5 * flops / bwd / 1e12});
  }
  return out;
}

int print_attention_rates(Backend& be, const ModelConfig& c, const ModelOptions& options,
                          int64_t batch, int64_t seq, const std::string& json_path) {
  const std::vector<AttentionFigures> rates = attention_rates(be, c, options, batch, seq);
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << "attention at the model's shapes (" << c.name << ", batch " << batch << " x " << seq
     << ", " << be.describe() << "):\n";
  nlohmann::json j;
  j["model"] = c.name;
  j["backend"] = be.describe();
  j["batch"] = batch;
  j["seq"] = seq;
  for (const AttentionFigures& a : rates) {
    const std::string shape = "head_dim " + std::to_string(a.head_dim) + ", " +
                              std::to_string(a.heads) + "/" + std::to_string(a.kv_heads) +
                              " heads, window " + std::to_string(a.window);
    const std::string pad(a.what.size() < 8 ? 8 - a.what.size() : 1, ' ');
    os << "  " << a.what << pad << "forward  " << a.forward_tflops << " TFLOP/s  (" << shape << ")\n";
    os << "  " << a.what << pad << "backward " << a.backward_tflops << " TFLOP/s  (" << shape << ")\n";
    j["attention"][a.what] = {{"head_dim", a.head_dim},
                              {"heads", a.heads},
                              {"kv_heads", a.kv_heads},
                              {"window", a.window},
                              {"forward_tflops", a.forward_tflops},
                              {"backward_tflops", a.backward_tflops}};
  }
  std::cout << os.str();
  if (!json_path.empty()) {
    write_file_atomic(json_path, j.dump(2) + "\n");
    std::cout << "wrote " << json_path << "\n";
  }
  return 0;
}

}  // namespace gemmax
