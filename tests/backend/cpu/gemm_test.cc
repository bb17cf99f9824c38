// The cpu backend's products (backend/cpu/gemm.h) against a direct fp64 sum, with every kernel
// family this CPU runs (isa.h; the AMX kernel through its emulated tiles), for bf16 and fp32, at
// sizes that exercise every edge: odd reductions, partial tiles and panels, row maps, accumulation,
// a reduction longer than one chunk, and a result independent of the thread count.
#include "gemmax/backend/cpu/gemm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "gemmax/base/rng.h"

namespace gemmax::cpu {
namespace {

// Every kernel family this CPU runs (amx_emulated everywhere).
std::vector<Isa> isas() {
  std::vector<Isa> v;
  for (Isa isa : {Isa::Avx2, Isa::AmxEmulated, Isa::Avx512Fp32, Isa::Avx512Bf16, Isa::Amx})
    if (isa_runs_here(isa)) v.push_back(isa);
  return v;
}

struct Scratch {
  std::vector<char> shared, threads;
  GemmScratch s;
  explicit Scratch(Isa isa) : shared(size_t(gemm_shared_bytes(isa))) {
    const int nt = std::max(4, omp_get_max_threads());
    const int64_t per_thread = gemm_thread_bytes(isa);
    threads.resize(size_t(per_thread) * size_t(nt));
    s.shared = shared.data();
    s.shared_bytes = gemm_shared_bytes(isa);
    s.thread_bytes = per_thread;
    for (int t = 0; t < nt; ++t) s.thread.push_back(threads.data() + size_t(t) * per_thread);
  }
};

template <class T>
std::vector<T> random(int64_t n, Rng& rng) {
  std::vector<T> v(static_cast<size_t>(n));
  for (auto& x : v) x = T(float(rng.normal()));
  return v;
}

inline double d(bf16 x) { return double(float(x)); }
inline double d(float x) { return x; }

// |got - exact| <= tol * sum |a||b| (+ the output's rounding): the fp32 accumulation bound.
template <class TC>
void expect_close(double got, double exact, double abs_sum, const std::string& what) {
  const double out_round = sizeof(TC) == 2 ? std::ldexp(std::abs(exact), -8) : 0.0;
  EXPECT_LE(std::abs(got - exact), 1e-5 * abs_sum + out_round + 1e-30) << what;
}

// shared_bytes > 0: the packing scratch is that small (reductions longer than it holds).
template <class T, class TC>
void check_gemm(Isa isa, int64_t m, int64_t n, int64_t k, bool transposed, bool mapped,
                bool accumulate, int64_t shared_bytes = 0) {
  Rng rng(uint64_t(m * 131 + n * 7 + k));
  Scratch s(isa);
  if (shared_bytes > 0) s.s.shared_bytes = shared_bytes;
  const int64_t rows_a = mapped ? m + 3 : m;
  std::vector<T> a = random<T>(rows_a * k, rng), w = random<T>(n * k, rng);
  std::vector<TC> c = random<TC>(m * n, rng);
  const std::vector<TC> c0 = c;
  std::vector<int32_t> map(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) map[size_t(i)] = int32_t((i * 7 + 2) % rows_a);
  const int32_t* amap = mapped ? map.data() : nullptr;
  gemm<T, TC>(isa, m, n, k, Rows<const T>{a.data(), k, amap},
              BMatrix<T>{w.data(), transposed ? k : n, transposed}, Rows<TC>{c.data(), n},
              accumulate, s.s);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const int64_t ai = mapped ? map[size_t(i)] : i;
      double exact = accumulate ? d(c0[size_t(i * n + j)]) : 0.0, abs_sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double bv = transposed ? d(w[size_t(j * k + p)]) : d(w[size_t(p * n + j)]);
        exact += d(a[size_t(ai * k + p)]) * bv;
        abs_sum += std::abs(d(a[size_t(ai * k + p)]) * bv);
      }
      expect_close<TC>(d(c[size_t(i * n + j)]), exact, abs_sum,
                       std::string(isa_name(isa)) + " gemm " + std::to_string(m) + "x" +
                           std::to_string(n) + "x" + std::to_string(k) + " at " +
                           std::to_string(i) + "," + std::to_string(j));
    }
}

template <class T, class TC>
void check_gemm_tn(Isa isa, int64_t n, int64_t k, int64_t m, bool mapped, bool accumulate) {
  Rng rng(uint64_t(m * 17 + n * 5 + k));
  Scratch s(isa);
  const int64_t rows = mapped ? m + 2 : m;
  std::vector<T> a = random<T>(rows * n, rng), b = random<T>(rows * k, rng);
  std::vector<TC> c = random<TC>(n * k, rng);
  const std::vector<TC> c0 = c;
  std::vector<int32_t> map(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) map[size_t(i)] = int32_t((i * 5 + 1) % rows);
  const int32_t* rmap = mapped ? map.data() : nullptr;
  gemm_tn<T, TC>(isa, n, k, m, Rows<const T>{a.data(), n, rmap}, Rows<const T>{b.data(), k, rmap},
                 c.data(), k, accumulate, s.s);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) {
      double exact = accumulate ? d(c0[size_t(i * k + j)]) : 0.0, abs_sum = 0;
      for (int64_t r = 0; r < m; ++r) {
        const int64_t rr = mapped ? map[size_t(r)] : r;
        exact += d(a[size_t(rr * n + i)]) * d(b[size_t(rr * k + j)]);
        abs_sum += std::abs(d(a[size_t(rr * n + i)]) * d(b[size_t(rr * k + j)]));
      }
      expect_close<TC>(d(c[size_t(i * k + j)]), exact, abs_sum,
                       std::string(isa_name(isa)) + " gemm_tn " + std::to_string(n) + "x" +
                           std::to_string(k) + "x" + std::to_string(m) + " at " +
                           std::to_string(i) + "," + std::to_string(j));
    }
}

TEST(CpuGemm, ProductsMatchTheDirectSum) {
  for (Isa isa : isas())
    for (bool transposed : {true, false})
      for (bool mapped : {false, true}) {
        for (auto [m, n, k] : {std::array<int64_t, 3>{1, 1, 1},
                               {13, 33, 17},
                               {30, 64, 64},
                               {29, 70, 131},
                               {3, 5, 1030}}) {
          check_gemm<bf16, bf16>(isa, m, n, k, transposed, mapped, false);
          check_gemm<bf16, float>(isa, m, n, k, transposed, mapped, true);
          check_gemm<float, float>(isa, m, n, k, transposed, mapped, false);
          check_gemm<bf16, bf16>(isa, m, n, k, transposed, mapped, true);
        }
      }
}

// A reduction longer than one packed panel of the scratch (the head's dx over a 262144-word
// vocabulary) runs in slices summed in fp32: here slices of 64 of a reduction of 301.
TEST(CpuGemm, ReductionsLongerThanTheScratchRunInSlices) {
  for (Isa isa : isas()) {
    SCOPED_TRACE(isa_name(isa));
    const int64_t slice_bytes = 64 * 32 * packed_width(isa);  // times sizeof(T) below
    for (bool transposed : {true, false})
      for (bool mapped : {false, true})
        for (bool accumulate : {false, true}) {
          check_gemm<bf16, bf16>(isa, 37, 45, 301, transposed, mapped, accumulate, 2 * slice_bytes);
          check_gemm<bf16, float>(isa, 37, 45, 301, transposed, mapped, accumulate,
                                  2 * slice_bytes);
          check_gemm<float, float>(isa, 37, 45, 301, transposed, mapped, accumulate,
                                   4 * slice_bytes);
          check_gemm<float, bf16>(isa, 37, 45, 301, transposed, mapped, accumulate,
                                  4 * slice_bytes);
        }
  }
}

TEST(CpuGemm, TransposedProductsMatchTheDirectSum) {
  for (Isa isa : isas())
    for (bool mapped : {false, true})
      for (auto [n, k, m] :
           {std::array<int64_t, 3>{1, 1, 1}, {15, 33, 7}, {28, 64, 63}, {5, 40, 1100}}) {
        check_gemm_tn<bf16, float>(isa, n, k, m, mapped, true);
        check_gemm_tn<bf16, float>(isa, n, k, m, mapped, false);
        check_gemm_tn<float, float>(isa, n, k, m, mapped, true);
        check_gemm_tn<bf16, bf16>(isa, n, k, m, mapped, false);
      }
}

TEST(CpuGemm, EmptyReductionWritesZerosOrKeepsTheOutput) {
  for (Isa isa : isas()) {
    Scratch s(isa);
    std::vector<float> c(6, 3.0f);
    gemm<float, float>(isa, 2, 3, 0, Rows<const float>{nullptr, 0},
                       BMatrix<float>{nullptr, 0, true}, Rows<float>{c.data(), 3}, true, s.s);
    EXPECT_EQ(c[4], 3.0f);
    gemm<float, float>(isa, 2, 3, 0, Rows<const float>{nullptr, 0},
                       BMatrix<float>{nullptr, 0, true}, Rows<float>{c.data(), 3}, false, s.s);
    EXPECT_EQ(c[4], 0.0f);
  }
}

// C [m, n] = A . W^T of bf16 A (rows through `map` when given) and W [n, k], against the direct
// fp64 sum at every `step`-th row and column.
void expect_direct_sum(const std::vector<bf16>& a, const int32_t* map, const std::vector<bf16>& w,
                       const std::vector<float>& c, int64_t m, int64_t n, int64_t k, int64_t step,
                       const std::string& what) {
  for (int64_t i = 0; i < m; i += step)
    for (int64_t j = 0; j < n; j += step) {
      const int64_t ai = map ? map[size_t(i)] : i;
      double exact = 0, abs_sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = d(a[size_t(ai * k + p)]) * d(w[size_t(j * k + p)]);
        exact += x, abs_sum += std::abs(x);
      }
      expect_close<float>(c[size_t(i * n + j)], exact, abs_sum,
                          what + " at " + std::to_string(i) + "," + std::to_string(j));
    }
}

// gemm copies each group of A's rows into its thread's scratch (a padded row stride); a scratch
// too small for one row block reads A in place. Several groups, groups that the split between
// threads cuts in the middle, a short last group and row maps: the copies give the direct sum,
// and bit for bit what reading A in place gives, at 1, 2 and 3 threads.
TEST(CpuGemm, CopiedRowGroupsMatchReadingInPlace) {
  const int saved = omp_get_max_threads();
  for (Isa isa : isas()) {
    SCOPED_TRACE(isa_name(isa));
    Rng rng(21);
    const int64_t m = 300, n = 300, k = 301;  // 10 panels: A is copied (kCopyMinPanels)
    const std::vector<bf16> a = random<bf16>((m + 5) * k, rng), w = random<bf16>(n * k, rng);
    std::vector<int32_t> map(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) map[size_t(i)] = int32_t((i * 11 + 4) % (m + 5));
    const int64_t block_bytes = 14 * (320 + 32) * int64_t(sizeof(bf16));  // one row block's copy
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 3})
      for (int64_t thread_bytes : {gemm_thread_bytes(isa), 3 * block_bytes, block_bytes - 2})
        for (bool mapped : {false, true}) {
          omp_set_num_threads(threads);
          Scratch s(isa);
          s.s.thread_bytes = thread_bytes;
          std::vector<float> c(size_t(m * n));
          gemm<bf16, float>(isa, m, n, k,
                            Rows<const bf16>{a.data(), k, mapped ? map.data() : nullptr},
                            BMatrix<bf16>{w.data(), k, true}, Rows<float>{c.data(), n}, false, s.s);
          if (results.size() < 2) {
            expect_direct_sum(a, mapped ? map.data() : nullptr, w, c, m, n, k, 7, "1 thread");
          } else {
            EXPECT_EQ(c, results[mapped ? 1 : 0])
                << threads << " threads, " << thread_bytes << " bytes of thread scratch";
          }
          results.push_back(std::move(c));
        }
  }
  omp_set_num_threads(saved);
}

// The copy of A's rows with every element type and output, accumulation, plain B and row maps;
// over several column chunks (the last too short to copy); inside the slices of a long
// reduction; and with a team larger than the scratch (threads past it read A in place).
TEST(CpuGemm, CopiedRowsInEveryFormMatchTheDirectSum) {
  for (Isa isa : isas()) {
    SCOPED_TRACE(isa_name(isa));
    const int64_t panel = (302 * 32 * int64_t(sizeof(bf16))) * packed_width(isa);
    for (bool transposed : {true, false})
      for (bool accumulate : {false, true}) {
        check_gemm<bf16, bf16>(isa, 45, 300, 301, transposed, true, accumulate);
        check_gemm<float, float>(isa, 45, 300, 301, transposed, false, accumulate);
        check_gemm<float, bf16>(isa, 45, 300, 301, transposed, true, accumulate);
        check_gemm<bf16, float>(isa, 45, 600, 301, transposed, false, accumulate, 9 * panel);
      }
    check_gemm<bf16, bf16>(isa, 30, 256, 8300, true, true, false);
    check_gemm<bf16, float>(isa, 30, 256, 8300, false, false, true);
  }
  const int saved = omp_get_max_threads();
  omp_set_num_threads(3);
  for (Isa isa : isas()) {
    Rng rng(5);
    const int64_t m = 100, n = 300, k = 64;
    const std::vector<bf16> a = random<bf16>(m * k, rng), w = random<bf16>(n * k, rng);
    std::vector<float> full(size_t(m * n)), short_team(size_t(m * n));
    for (bool cut : {false, true}) {
      Scratch s(isa);
      if (cut) s.s.thread = {s.s.thread[0], s.s.thread[1]};  // a fresh vector: no spare slots
      gemm<bf16, float>(isa, m, n, k, Rows<const bf16>{a.data(), k},
                        BMatrix<bf16>{w.data(), k, true},
                        Rows<float>{(cut ? short_team : full).data(), n}, false, s.s);
    }
    expect_direct_sum(a, nullptr, w, full, m, n, k, 1, std::string(isa_name(isa)) + " 3 threads");
    EXPECT_EQ(full, short_team) << isa_name(isa) << ": 3 threads, scratch for 2";
  }
  omp_set_num_threads(saved);
}

// Each output is reduced by one thread in one fixed order: 1 and 2 threads agree bit for bit.
TEST(CpuGemm, ResultsDoNotDependOnTheThreadCount) {
  for (Isa isa : isas()) {
    Rng rng(9);
    Scratch s(isa);
    const int64_t m = 100, n = 96, k = 300;
    const std::vector<bf16> a = random<bf16>(m * k, rng), w = random<bf16>(n * k, rng);
    std::vector<float> c1(size_t(m * n)), c2(size_t(m * n)), t1(size_t(n * k)), t2(size_t(n * k));
    const int saved = omp_get_max_threads();
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      auto& c = threads == 1 ? c1 : c2;
      auto& t = threads == 1 ? t1 : t2;
      gemm<bf16, float>(isa, m, n, k, Rows<const bf16>{a.data(), k},
                        BMatrix<bf16>{w.data(), k, true}, Rows<float>{c.data(), n}, false, s.s);
      gemm_tn<bf16, float>(isa, n, k, m, Rows<const bf16>{a.data(), k},
                           Rows<const bf16>{a.data(), k}, t.data(), k, false, s.s);
    }
    omp_set_num_threads(saved);
    EXPECT_EQ(c1, c2) << isa_name(isa);
    EXPECT_EQ(t1, t2) << isa_name(isa);
  }
}

// avx512_fp32 widens bf16 exactly and runs one FMA per reduction element, in order: each output
// is bit for bit the sequential fp32 FMA chain (then + the old C, then rounded once), whatever the
// packing (B transposed or plain and widened at packing, row maps, A^T blocks, odd reductions,
// partial panels and tiles, the serial forms) and the thread count.
TEST(CpuGemm, Avx512Fp32IsTheSequentialFmaChain) {
  if (!isa_runs_here(Isa::Avx512Fp32)) GTEST_SKIP() << "no AVX-512 on this CPU";
  const Isa isa = Isa::Avx512Fp32;
  Scratch s(isa);
  const auto chain = [](int64_t k, auto&& a, auto&& b) {
    float acc = 0.0f;
    for (int64_t p = 0; p < k; ++p) acc = std::fma(a(p), b(p), acc);
    return acc;
  };
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2})
    for (auto [m, n, k] :
         {std::array<int64_t, 3>{1, 1, 1}, {15, 33, 17}, {29, 70, 131}, {3, 40, 301}}) {
      omp_set_num_threads(threads);
      Rng rng(uint64_t(m * 7 + n * 3 + k));
      const int64_t rows_a = m + 3;
      const std::vector<bf16> a = random<bf16>(rows_a * std::max(k, n), rng);
      const std::vector<bf16> w = random<bf16>(std::max(n, rows_a) * k, rng);
      const std::vector<float> c0 = random<float>(std::max(m * n, n * k), rng);
      std::vector<int32_t> map(static_cast<size_t>(m));
      for (int64_t i = 0; i < m; ++i) map[size_t(i)] = int32_t((i * 7 + 2) % rows_a);
      const std::string what = std::to_string(m) + "x" + std::to_string(n) + "x" +
                               std::to_string(k) + ", " + std::to_string(threads) + " threads";
      for (bool transposed : {true, false})
        for (bool serial : {false, true}) {
          std::vector<float> c = c0;
          const Rows<const bf16> ar{a.data(), k, map.data()};
          const BMatrix<bf16> bm{w.data(), transposed ? k : n, transposed};
          if (serial)
            gemm_serial<bf16, float>(isa, m, n, k, ar, bm, Rows<float>{c.data(), n}, true,
                                     s.s.thread[0], s.s.thread_bytes);
          else
            gemm<bf16, float>(isa, m, n, k, ar, bm, Rows<float>{c.data(), n}, true, s.s);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              const bf16* arow = a.data() + map[size_t(i)] * k;
              const float want =
                  c0[size_t(i * n + j)] +
                  chain(
                      k, [&](int64_t p) { return float(arow[p]); },
                      [&](int64_t p) {
                        return float(transposed ? w[size_t(j * k + p)] : w[size_t(p * n + j)]);
                      });
              ASSERT_EQ(c[size_t(i * n + j)], want)
                  << (serial ? "gemm_serial " : "gemm ") << (transposed ? "NT " : "NN ") << what
                  << " at " << i << "," << j;
            }
        }
      // gemm_tn: C [n, k] = A^T B over m mapped rows (A^T packed in pairs, B's panel widened).
      for (bool serial : {false, true}) {
        std::vector<float> c = c0;
        const Rows<const bf16> ar{a.data(), n, map.data()}, br{w.data(), k, map.data()};
        if (serial)
          gemm_tn_serial<bf16, float>(isa, n, k, m, ar, br, c.data(), k, false, s.s.thread[0],
                                      s.s.thread_bytes);
        else
          gemm_tn<bf16, float>(isa, n, k, m, ar, br, c.data(), k, false, s.s);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < k; ++j) {
            const float want = chain(
                m, [&](int64_t r) { return float(a[size_t(map[size_t(r)] * n + i)]); },
                [&](int64_t r) { return float(w[size_t(map[size_t(r)] * k + j)]); });
            ASSERT_EQ(c[size_t(i * k + j)], want)
                << (serial ? "gemm_tn_serial " : "gemm_tn ") << what << " at " << i << "," << j;
          }
      }
    }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace gemmax::cpu
