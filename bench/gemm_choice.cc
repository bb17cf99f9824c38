// Which product kernels the cpu backend should use, per kernel family: gemmax's own engine
// (backend/cpu/gemm.h) against the libraries that bring their own microkernels and ISA
// dispatch, oneDNN (matmul primitive, brgemm kernels) and libxsmm (JIT GEMM kernels), each
// limited to the ISA class of the family, side by side in one run on gemma4-small's shapes at
// batch 4 x 1024 (dense: 4096 tokens; one expert: 512 rows).
//
//   build/bin/gemm_choice [threads] [family]   (bench/run_gemm_choice.sh: all three families)
//
//   family        gemmax kernels   oneDNN max ISA       libxsmm target
//   avx512_bf16   avx512_bf16      avx512_core_bf16     cpx (AVX-512 BF16)
//   avx512_fp32   avx512_fp32      avx512_core          skx (AVX-512, no BF16)
//   avx2          avx2             avx2                 hsw (AVX2)
//
// The limits are set through the libraries' calls (dnnl::set_max_cpu_isa, the DNNL_MAX_CPU_ISA
// of the environment; libxsmm_set_target_arch, its LIBXSMM_TARGET), before their first kernel.
// Columns, GFLOP/s (best of 3 runs of at least 0.2 s each):
//   gemmax        bf16 data as the backend runs it, its packing of B included; bf16 C (fp32 C
//                 for the weight gradients 'T');
//   oneDNN bf16   the same product, transposes given as strides (its own reorders included);
//   oneDNN f32    the same on fp32 copies of the data (the choice of an fp32 framework);
//   libxsmm bf16  its kernel over operands laid out for it beforehand (B as VNNI pairs in
//                 64-column panels, A as rows along the reduction), fp32 C: the layout work is
//                 not timed, so this is the most the library's kernel could bring to the engine;
//   libxsmm f32   the same in fp32 (fp32 panels and rows).
// A library with no kernel for the class prints "-" (libxsmm has no bf16 kernel below AVX-512;
// oneDNN's reference loops, "ref", are not timed). Every result is checked at a few places.
#include <libxsmm.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
double rate(double flops, const std::function<void()>& f, int reps = 3) {
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

struct Family {
  const char* name;
  Isa isa;
  dnnl::cpu_isa onednn;
  const char* libxsmm;
};

// The product as C [M, N] = X [M, K] . Y [K, N] over plain row-major operands, Y given by a
// function (the three ops differ only in where X and Y come from).
struct Operands {
  std::vector<float> x, y;  // X [M][K], Y [K][N], fp32 (exact copies of the bf16 data)
};

// libxsmm: C (row-major, ldc N) = X . Y through its column-major kernel C^T = Y^T X^T, called
// per tile of 64 columns x 64 rows over the whole reduction: Y's 64-column panels are its "A"
// (VNNI pairs [K/2][64][2] for bf16, [K][64] for fp32), X's rows its "B" (ldb K).
constexpr int64_t kXsmmCols = 64, kXsmmRows = 64;

template <class E>
std::vector<E> xsmm_panels(const Operands& o, int64_t K, int64_t N, bool vnni) {
  std::vector<E> out(size_t(K * N));
  for (int64_t j0 = 0; j0 < N; j0 += kXsmmCols)
    for (int64_t p = 0; p < K; ++p)
      for (int64_t j = 0; j < kXsmmCols; ++j) {
        const float v = o.y[size_t(p * N + j0 + j)];
        const int64_t at = vnni ? (p / 2) * kXsmmCols * 2 + j * 2 + p % 2 : p * kXsmmCols + j;
        out[size_t(j0 * K + at)] = E(v);
      }
  return out;
}

template <class E, class Kernel>
void xsmm_run(Kernel kernel, const E* panels, const E* x, float* c, int64_t M, int64_t N,
              int64_t K) {
  const int64_t row_tiles = M / kXsmmRows, col_tiles = N / kXsmmCols;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < row_tiles * col_tiles; ++t) {
    const int64_t i0 = (t / col_tiles) * kXsmmRows, j0 = (t % col_tiles) * kXsmmCols;
    kernel(panels + j0 * K, x + i0 * K, c + i0 * N + j0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : omp_get_max_threads();
  const std::string family_name = argc > 2 ? argv[2] : "avx512_bf16";
  const Family families[] = {
      {"avx512_bf16", Isa::Avx512Bf16, dnnl::cpu_isa::avx512_core_bf16, "cpx"},
      {"avx512_fp32", Isa::Avx512Fp32, dnnl::cpu_isa::avx512_core, "skx"},
      {"avx2", Isa::Avx2, dnnl::cpu_isa::avx2, "hsw"},
  };
  if (threads < 1) {
    std::fprintf(stderr, "gemm_choice: threads must be at least 1, got '%s'\n", argv[1]);
    return 2;
  }
  const Family* fam = nullptr;
  for (const Family& f : families)
    if (family_name == f.name) fam = &f;
  if (!fam) {
    std::fprintf(stderr,
                 "gemm_choice: unknown family '%s': expected avx512_bf16, avx512_fp32 or avx2\n",
                 family_name.c_str());
    return 2;
  }
  if (!isa_runs_here(fam->isa)) {
    std::fprintf(stderr, "gemm_choice: this CPU cannot run the %s family\n", fam->name);
    return 2;
  }
  omp_set_num_threads(threads);
  dnnl::set_max_cpu_isa(fam->onednn);  // before any primitive: DNNL_MAX_CPU_ISA
  libxsmm_init();
  libxsmm_set_target_arch(fam->libxsmm);  // LIBXSMM_TARGET
  const dnnl_version_t* dv = dnnl_version();
  std::printf(
      "threads %d, family %s: gemmax kernels %s, oneDNN %d.%d (max ISA %s), libxsmm %s "
      "(target %s)\n",
      threads, fam->name, isa_name(fam->isa), dv->major, dv->minor,
      fam->onednn == dnnl::cpu_isa::avx512_core_bf16 ? "avx512_core_bf16"
      : fam->onednn == dnnl::cpu_isa::avx512_core    ? "avx512_core"
                                                     : "avx2",
      LIBXSMM_VERSION, libxsmm_get_target_arch());

  const int64_t shared_bytes = gemm_shared_bytes(fam->isa),
                thread_bytes = gemm_thread_bytes(fam->isa);
  std::vector<char> shared(static_cast<size_t>(shared_bytes));
  std::vector<char> per_thread(static_cast<size_t>(thread_bytes) * size_t(threads));
  GemmScratch scratch{shared.data(), shared_bytes, {}, thread_bytes};
  for (int t = 0; t < threads; ++t) scratch.thread.push_back(per_thread.data() + t * thread_bytes);

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
  std::printf("%-20s %19s %8s %12s %12s %12s %12s   %s\n", "GFLOP/s (/ gemmax)", "m x n x k",
              "gemmax", "oneDNN bf16", "oneDNN f32", "xsmm bf16", "xsmm f32", "oneDNN kernels");
  for (const Shape& s : shapes) {
    const int64_t M = s.m, N = s.n, K = s.k;
    std::vector<bf16> a(size_t(M * K)), w(size_t(N * K));
    for (size_t i = 0; i < a.size(); ++i) a[i] = bf16(float((i * 37 % 200) - 100) / 100.0f);
    for (size_t i = 0; i < w.size(); ++i) w[i] = bf16(float((i * 53 % 200) - 100) / 100.0f);
    std::vector<bf16> c(size_t(M * N));
    std::vector<float> cf(size_t(M * N));
    const double flops = 2.0 * double(M) * double(N) * double(K);

    // X [M][K] and Y [K][N] in fp32: libxsmm's operands (laid out for it below, not timed) and
    // the direct sums every result is checked against at 8 places (a mismatch: "WRONG:" and who).
    std::vector<float> af(a.size()), wf(w.size());
    for (size_t i = 0; i < a.size(); ++i) af[i] = float(a[i]);
    for (size_t i = 0; i < w.size(); ++i) wf[i] = float(w[i]);
    Operands o;
    o.x.resize(size_t(M * K));
    o.y.resize(size_t(K * N));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t p = 0; p < K; ++p)
        o.x[size_t(i * K + p)] = s.op == 'T' ? af[size_t(p * M + i)] : af[size_t(i * K + p)];
    for (int64_t p = 0; p < K; ++p)
      for (int64_t j = 0; j < N; ++j)
        o.y[size_t(p * N + j)] = s.op == 'N' ? wf[size_t(j * K + p)] : wf[size_t(p * N + j)];
    auto wrong = [&](bool bf16_out) {
      for (int64_t t = 0; t < 8; ++t) {
        const int64_t i = (t * 977) % M, j = (t * 131 + 7) % N;
        double exact = 0, mag = 0;
        for (int64_t p = 0; p < K; ++p) {
          exact += double(o.x[size_t(i * K + p)]) * o.y[size_t(p * N + j)];
          mag += std::abs(double(o.x[size_t(i * K + p)]) * o.y[size_t(p * N + j)]);
        }
        const double got = bf16_out ? double(float(c[size_t(i * N + j)])) : cf[size_t(i * N + j)];
        if (std::abs(got - exact) > 1e-4 * mag + (bf16_out ? std::abs(exact) / 128 : 0.0) + 1e-6)
          return true;
      }
      return false;
    };

    // gemmax. 'T': A is [K, M] (a), B is [K, N] (w), C fp32.
    std::function<void()> ours;
    if (s.op == 'T')
      ours = [&] {
        gemm_tn<bf16, float>(fam->isa, M, N, K, Rows<const bf16>{a.data(), M},
                             Rows<const bf16>{w.data(), N}, cf.data(), N, false, scratch);
      };
    else
      ours = [&] {
        gemm<bf16, bf16>(fam->isa, M, N, K, Rows<const bf16>{a.data(), K},
                         BMatrix<bf16>{w.data(), s.op == 'N' ? K : N, s.op == 'N'},
                         Rows<bf16>{c.data(), N}, false, scratch);
      };
    const double g = rate(flops, ours);
    const bool g_wrong = wrong(s.op != 'T');

    // oneDNN: the same product through strides (transposes as layouts), bf16 and fp32.
    using dt = dnnl::memory::data_type;
    std::string impls;
    std::string bad;  // the columns whose results were wrong
    auto onednn = [&](dt type) -> double {
      const dnnl::memory::desc a_md = s.op == 'T' ? dnnl::memory::desc({M, K}, type, {1, M})
                                                  : dnnl::memory::desc({M, K}, type, {K, 1});
      const dnnl::memory::desc b_md = s.op == 'N' ? dnnl::memory::desc({K, N}, type, {1, K})
                                                  : dnnl::memory::desc({K, N}, type, {N, 1});
      const bool f32 = type == dt::f32;
      const dnnl::memory::desc c_md({M, N}, f32 || s.op == 'T' ? dt::f32 : dt::bf16, {N, 1});
      dnnl::matmul::primitive_desc pd;
      try {
        pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), eng);
      } catch (const dnnl::error&) {
        impls += std::string(impls.empty() ? "" : ", ") + (f32 ? "f32 -" : "bf16 -");
        return 0;
      }
      const std::string impl = pd.impl_info_str();
      impls += std::string(impls.empty() ? "" : ", ") + impl;
      if (impl.rfind("ref", 0) == 0) return 0;  // reference loops: no kernel for this class
      const dnnl::matmul prim(pd);
      dnnl::memory am(a_md, eng, f32 ? static_cast<void*>(af.data()) : a.data());
      dnnl::memory bm(b_md, eng, f32 ? static_cast<void*>(wf.data()) : w.data());
      dnnl::memory cm(c_md, eng, f32 || s.op == 'T' ? static_cast<void*>(cf.data()) : c.data());
      const double r = rate(flops, [&] {
        prim.execute(strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
        strm.wait();
      });
      if (wrong(!f32 && s.op != 'T')) bad += f32 ? " oneDNN-f32" : " oneDNN-bf16";
      return r;
    };
    const double ob = onednn(dt::bf16), of = onednn(dt::f32);

    // libxsmm: X and Y laid out for its kernel beforehand (not timed), fp32 C.
    const libxsmm_blasint xm = kXsmmCols, xn = kXsmmRows, xk = libxsmm_blasint(K);
    const libxsmm_blasint lda = kXsmmCols, ldb = libxsmm_blasint(K), ldc = libxsmm_blasint(N);
    const float alpha = 1.0f, beta = 0.0f;
    double xb = 0, xf = 0;
    {
      const int flags = LIBXSMM_GEMM_FLAG_VNNI_A;
      const libxsmm_bsmmfunction kb =
          libxsmm_bsmmdispatch(xm, xn, xk, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr);
      if (kb) {
        const std::vector<libxsmm_bfloat16> panels = [&] {
          std::vector<bf16> p = xsmm_panels<bf16>(o, K, N, true);
          std::vector<libxsmm_bfloat16> r(p.size());
          std::memcpy(r.data(), p.data(), p.size() * sizeof(bf16));
          return r;
        }();
        std::vector<libxsmm_bfloat16> x(o.x.size());
        for (size_t i = 0; i < x.size(); ++i) x[i] = bf16(o.x[i]).bits;
        xb = rate(flops, [&] {
          xsmm_run([&](const libxsmm_bfloat16* pa, const libxsmm_bfloat16* pb,
                       float* pc) { kb(pa, pb, pc); },
                   panels.data(), x.data(), cf.data(), M, N, K);
        });
        if (wrong(false)) bad += " xsmm-bf16";
      }
    }
    {
      const int flags = LIBXSMM_GEMM_FLAG_NONE;
      const libxsmm_smmfunction kf =
          libxsmm_smmdispatch(xm, xn, xk, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr);
      if (kf) {
        const std::vector<float> panels = xsmm_panels<float>(o, K, N, false);
        xf = rate(flops, [&] {
          xsmm_run([&](const float* pa, const float* pb, float* pc) { kf(pa, pb, pc); },
                   panels.data(), o.x.data(), cf.data(), M, N, K);
        });
        if (wrong(false)) bad += " xsmm-f32";
      }
    }
    auto cell = [&](double v) {
      char buf[32];
      if (v > 0)
        std::snprintf(buf, sizeof buf, "%6.1f (%4.2f)", v, v / g);
      else
        std::snprintf(buf, sizeof buf, "%12s", "-");
      return std::string(buf);
    };
    if (g_wrong) bad += " gemmax";
    std::printf("%-20s %5lld x%6lld x%6lld %8.1f %s %s %s %s   %s%s\n", s.what, (long long)M,
                (long long)N, (long long)K, g, cell(ob).c_str(), cell(of).c_str(), cell(xb).c_str(),
                cell(xf).c_str(), impls.c_str(), bad.empty() ? "" : ("   WRONG:" + bad).c_str());
    std::fflush(stdout);
  }
  return 0;
}
