// The cpu backend's product kernel families (backend/cpu/isa.h) side by side on a model's
// shapes, in one run: each family this CPU runs (amx_emulated aside: it is for tests), GFLOP/s
// per shape, as a fraction of the best instruction peak measured in the same run on the same
// threads (backend/cpu/peaks.h). Rounds alternate the families, so load from other jobs on a
// shared machine hits them alike; each figure is the best of its rounds.
//
//   build/bin/kernel_families [threads] [rounds] [shapes]   (bench/run_kernel_families.sh)
//
// shapes: small (default), gemma4-small's products at batch 4 x 1024, weight gradients and one
// expert's included; e2b, the products of a gemma4-e2b LoRA step at batch 1 x 2048 (frozen
// weights: forward and input gradients only; the head's over a slice of its 262144 words).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "gemmax/backend/cpu/gemm.h"
#include "gemmax/backend/cpu/peaks.h"

using namespace gemmax;
using namespace gemmax::cpu;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The rate of f over runs filling at least 0.2 s (GFLOP/s).
double rate(double flops, const std::function<void()>& f) {
  f();
  int n = 0;
  const double t0 = now();
  double t = 0;
  do {
    f();
    ++n;
    t = now() - t0;
  } while (t < 0.2);
  return flops * n / t / 1e9;
}

struct Shape {
  const char* what;
  int64_t m, n, k;
  char op;  // 'N': C = A . W^T (forward), 'D': C = A . W (dlhs), 'T': C = A^T . B (weight grad)
};

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : omp_get_max_threads();
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  const std::string which = argc > 3 ? argv[3] : "small";
  omp_set_num_threads(threads);
  std::string why;
  const Isa chosen = choose_isa("auto", &why);
  std::vector<Isa> families;
  for (Isa isa : {Isa::Amx, Isa::Avx512Bf16, Isa::Avx512Fp32, Isa::Avx2})
    if (isa_runs_here(isa)) families.push_back(isa);
  std::printf("threads %d, %d rounds, %s shapes; auto chooses %s (%s)\n", threads, rounds,
              which.c_str(), isa_name(chosen), why.c_str());
  const std::vector<InstructionPeak> peaks = instruction_peaks(threads);
  double best_peak = 0;
  for (const InstructionPeak& p : peaks) {
    std::printf("peak  %-40s %8.1f GFLOP/s (%.1f per thread)\n", p.name.c_str(), p.tflops * 1e3,
                p.per_thread() * 1e3);
    best_peak = std::max(best_peak, p.tflops * 1e3);
  }

  // Room for the family that needs the most (avx512_fp32: fp32 panels); each family is given
  // its own sizes, as the backend gives them.
  std::vector<char> shared(static_cast<size_t>(gemm_shared_bytes(Isa::Avx512Fp32)));
  std::vector<char> per_thread(static_cast<size_t>(gemm_thread_bytes(Isa::Avx512Fp32)) *
                               size_t(threads));
  const auto scratch_for = [&](Isa isa) {
    GemmScratch s{shared.data(), gemm_shared_bytes(isa), {}, gemm_thread_bytes(isa)};
    for (int t = 0; t < threads; ++t)
      s.thread.push_back(per_thread.data() + t * gemm_thread_bytes(isa));
    return s;
  };
  const std::vector<Shape> small = {
      {"q/o projection fwd", 4096, 512, 512, 'N'},    {"mlp gate_up fwd", 4096, 768, 512, 'N'},
      {"mlp down dlhs", 4096, 384, 512, 'D'},         {"q projection wgrad", 512, 512, 4096, 'T'},
      {"head fwd (one tile)", 4096, 32768, 512, 'N'}, {"head dx", 4096, 512, 32768, 'D'},
      {"head wgrad", 32768, 512, 4096, 'T'},          {"expert gate_up fwd", 512, 256, 512, 'N'},
      {"expert down dlhs", 512, 512, 128, 'D'},
  };
  const std::vector<Shape> e2b = {
      {"q fwd", 2048, 2048, 1536, 'N'},         {"k or v fwd", 2048, 256, 1536, 'N'},
      {"o fwd", 2048, 1536, 2048, 'N'},         {"mlp gate_up fwd", 2048, 12288, 1536, 'N'},
      {"mlp down fwd", 2048, 1536, 6144, 'N'},  {"head fwd (16384 words)", 2048, 16384, 1536, 'N'},
      {"q dlhs", 2048, 1536, 2048, 'D'},        {"mlp gate_up dlhs", 2048, 1536, 12288, 'D'},
      {"mlp down dlhs", 2048, 6144, 1536, 'D'}, {"head dx (32768 words)", 2048, 1536, 32768, 'D'},
  };
  if (which != "small" && which != "e2b") {
    std::fprintf(stderr, "kernel_families: unknown shapes '%s': expected small or e2b\n",
                 which.c_str());
    return 2;
  }
  const std::vector<Shape>& shapes = which == "e2b" ? e2b : small;
  std::printf("%-24s %20s", "GFLOP/s (of best peak)", "m x n x k");
  for (Isa isa : families) std::printf(" %18s", isa_name(isa));
  std::printf("\n");
  for (const Shape& s : shapes) {
    const int64_t M = s.m, N = s.n, K = s.k;
    std::vector<bf16> a(size_t(M * K)), w(size_t(N * K)), c(size_t(M * N));
    std::vector<float> cf(size_t(M * N));
    for (size_t i = 0; i < a.size(); ++i) a[i] = bf16(float((i * 37 % 200) - 100) / 100.0f);
    for (size_t i = 0; i < w.size(); ++i) w[i] = bf16(float((i * 53 % 200) - 100) / 100.0f);
    const double flops = 2.0 * double(M) * double(N) * double(K);
    std::vector<double> best(families.size(), 0.0);
    for (int r = 0; r < rounds; ++r)
      for (size_t f = 0; f < families.size(); ++f) {
        const Isa isa = families[f];
        const GemmScratch scratch = scratch_for(isa);
        std::function<void()> run;
        if (s.op == 'T')  // C [M, N] = A^T B: A [K, M], B [K, N], fp32 C (a weight gradient)
          run = [&] {
            gemm_tn<bf16, float>(isa, M, N, K, Rows<const bf16>{a.data(), M},
                                 Rows<const bf16>{w.data(), N}, cf.data(), N, false, scratch);
          };
        else
          run = [&] {
            gemm<bf16, bf16>(isa, M, N, K, Rows<const bf16>{a.data(), K},
                             BMatrix<bf16>{w.data(), s.op == 'N' ? K : N, s.op == 'N'},
                             Rows<bf16>{c.data(), N}, false, scratch);
          };
        best[f] = std::max(best[f], rate(flops, run));
      }
    std::printf("%-24s %6lld x%6lld x%6lld", s.what, (long long)M, (long long)N, (long long)K);
    for (double g : best) std::printf(" %10.1f (%4.2f)", g, g / best_peak);
    std::printf("\n");
  }
  return 0;
}
