// Which matmul the cpu backend should use: gemmax's own product engine (backend/cpu/gemm.h)
// against oneDNN's bf16 matmul (Debian's libdnnl, brgemm AVX-512 BF16 kernels), side by side
// in one run, on gemma4-small's shapes at batch 4 x 1024. Prints GFLOP/s and the ratio.
//
//   build/bin/gemm_choice [threads]      (bench/run_gemm_choice.sh runs it at high priority)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <dnnl.hpp>
#include <functional>
#include <string>
#include <vector>

#include "gemmax/backend/cpu/gemm.h"

using namespace gemmax;
using namespace gemmax::cpu;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best of `reps` runs of at least 0.2 s each (GFLOP/s).
double rate(double flops, const std::function<void()>& f, int reps = 5) {
  f();
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    int n = 0;
    const double t0 = now();
    double t = 0;
    do {
      f();
      ++n;
      t = now() - t0;
    } while (t < 0.2);
    best = std::max(best, flops * n / t / 1e9);
  }
  return best;
}

struct Shape {
  const char* what;
  int64_t m, n, k;
  char op;  // 'N': C = A . W^T (forward), 'D': C = A . W (dlhs), 'T': C = A^T . B (weight grad)
};

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : omp_get_max_threads();
  omp_set_num_threads(threads);
  const Isa isa = choose_isa("auto");
  std::printf("threads %d, gemmax kernels: %s, oneDNN %d.%d\n", threads, isa_name(isa),
              dnnl_version()->major, dnnl_version()->minor);
  std::vector<char> shared(static_cast<size_t>(gemm_shared_bytes()));
  std::vector<char> per_thread(static_cast<size_t>(gemm_thread_bytes()) * 64);
  GemmScratch scratch{shared.data(), gemm_shared_bytes(), {}, gemm_thread_bytes()};
  for (int t = 0; t < 64; ++t)
    scratch.thread.push_back(per_thread.data() + t * gemm_thread_bytes());

  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const Shape shapes[] = {
      {"q/o projection fwd", 4096, 512, 512, 'N'},    {"mlp gate_up fwd", 4096, 768, 512, 'N'},
      {"mlp down dlhs", 4096, 384, 512, 'D'},         {"q projection wgrad", 512, 512, 4096, 'T'},
      {"head fwd (one tile)", 4096, 32768, 512, 'N'}, {"head dx", 4096, 512, 32768, 'D'},
      {"head wgrad", 32768, 512, 4096, 'T'},
      {"expert gate_up fwd", 512, 256, 512, 'N'},     {"expert down fwd", 512, 512, 128, 'N'},
      {"expert gate_up dlhs", 512, 512, 256, 'D'},    {"expert down wgrad", 512, 128, 512, 'T'},
  };
  std::printf("%-22s %20s %10s %10s %7s\n", "shape", "m x n x k", "gemmax", "oneDNN", "ratio");
  for (const Shape& s : shapes) {
    const int64_t M = s.m, N = s.n, K = s.k;
    std::vector<bf16> a(size_t(std::max(M * K, K * M))), w(size_t(N * K));
    for (size_t i = 0; i < a.size(); ++i) a[i] = bf16(float((i * 37 % 200) - 100) / 100.0f);
    for (size_t i = 0; i < w.size(); ++i) w[i] = bf16(float((i * 53 % 200) - 100) / 100.0f);
    std::vector<bf16> c(size_t(M * N));
    std::vector<float> cf(size_t(M * N));
    const double flops = 2.0 * double(M) * double(N) * double(K);
    std::function<void()> ours;
    if (s.op == 'T') {  // C [M, N] = A^T B: A [K, M], B [K, N], fp32 C (a weight gradient)
      ours = [&] {
        gemm_tn<bf16, float>(isa, M, N, K, Rows<const bf16>{a.data(), M},
                             Rows<const bf16>{w.data(), N}, cf.data(), N, false, scratch);
      };
    } else {
      ours = [&] {
        gemm<bf16, bf16>(isa, M, N, K, Rows<const bf16>{a.data(), K},
                         BMatrix<bf16>{w.data(), s.op == 'N' ? K : N, s.op == 'N'},
                         Rows<bf16>{c.data(), N}, false, scratch);
      };
    }
    using dt = dnnl::memory::data_type;
    // oneDNN: the same product through strides (transposes as layouts).
    const dnnl::memory::desc a_md = s.op == 'T' ? dnnl::memory::desc({M, K}, dt::bf16, {1, M})
                                                : dnnl::memory::desc({M, K}, dt::bf16, {K, 1});
    const dnnl::memory::desc b_md = s.op == 'N' ? dnnl::memory::desc({K, N}, dt::bf16, {1, K})
                                                : dnnl::memory::desc({K, N}, dt::bf16, {N, 1});
    const dnnl::memory::desc c_md({M, N}, s.op == 'T' ? dt::f32 : dt::bf16, {N, 1});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), eng);
    const dnnl::matmul prim(pd);
    dnnl::memory am(a_md, eng, a.data()), bm(b_md, eng, w.data()),
        cm(c_md, eng, s.op == 'T' ? static_cast<void*>(cf.data()) : c.data());
    auto theirs = [&] {
      prim.execute(strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
      strm.wait();
    };
    const double g = rate(flops, ours), o = rate(flops, theirs);
    std::printf("%-22s %6lld x%6lld x%6lld %10.1f %10.1f %7.2f   (%s)\n", s.what, (long long)M,
                (long long)N, (long long)K, g, o, g / o, pd.impl_info_str());
  }
  return 0;
}
