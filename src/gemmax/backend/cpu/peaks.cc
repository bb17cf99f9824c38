#include "gemmax/backend/cpu/peaks.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <functional>

#include "gemmax/backend/cpu/amx_tiles.h"
#include "gemmax/backend/cpu/isa.h"
#include "gemmax/base/timer.h"

// GCC 12 warns inside its own AVX-512 intrinsics (the _mm512_undefined_* they start from).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace gemmax::cpu {
namespace {

constexpr int kAcc = 12;  // independent accumulators: more than latency x ports on any core

// Each loop returns a value depending on every accumulator, so none is optimised away.
__attribute__((target("avx2,fma"))) float fma_ymm(int64_t iters) {
  __m256 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm256_set1_ps(float(i));
  const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-3f);
  for (int64_t n = 0; n < iters; ++n)
#pragma GCC unroll 12
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  float s = 0;
  for (int i = 0; i < kAcc; ++i) s += _mm256_cvtss_f32(acc[i]);
  return s;
}

__attribute__((target("avx512f,fma"))) float fma_zmm(int64_t iters) {
  __m512 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-3f);
  for (int64_t n = 0; n < iters; ++n)
#pragma GCC unroll 12
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  float s = 0;
  for (int i = 0; i < kAcc; ++i) s += _mm512_cvtss_f32(acc[i]);
  return s;
}

__attribute__((target("avx512f,avx512bf16"))) float dot_bf16_zmm(int64_t iters) {
  __m512 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512bh x = __m512bh(_mm512_set1_epi32(0x3f803f80)),
                 y = __m512bh(_mm512_set1_epi32(0x3a803a80));
  for (int64_t n = 0; n < iters; ++n)
#pragma GCC unroll 12
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
  float s = 0;
  for (int i = 0; i < kAcc; ++i) s += _mm512_cvtss_f32(acc[i]);
  return s;
}

// Two C tiles (16 x 16 fp32) accumulating A (16 x 32 bf16) . B (16 pairs x 16) in turn; the
// tile instructions are the kernel's own (amx_tiles.h).
float amx_tiles(int64_t iters) {
  TileConfig cfg;
  for (int t = 0; t < 5; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  HardwareTiles::config(cfg);
  alignas(64) uint16_t ab[16][32];
  std::fill(&ab[0][0], &ab[0][0] + 16 * 32, uint16_t(0x3a80));
  HardwareTiles::load<2>(ab, 64);
  HardwareTiles::load<3>(ab, 64);
  HardwareTiles::load<4>(ab, 64);
  HardwareTiles::zero<0>();
  HardwareTiles::zero<1>();
  for (int64_t n = 0; n < iters; ++n) {
    HardwareTiles::dpbf16ps<0, 2, 3>();
    HardwareTiles::dpbf16ps<1, 2, 4>();
  }
  alignas(64) float out[16][32];
  HardwareTiles::store<0>(out, 128);
  HardwareTiles::store<1>(&out[0][16], 128);
  return out[0][0] + out[15][31];
}

// Runs `loop` on every thread at once for about `seconds` (iterations calibrated on the first
// run), best of 3; flops_per_iter per thread per iteration.
InstructionPeak measure(const std::string& name, double flops_per_iter,
                        const std::function<float(int64_t)>& loop, int threads, double seconds) {
  volatile float sink = 0;
  int64_t iters = 1 << 12;
  for (;;) {  // calibrate on one thread
    Timer t;
    sink = sink + loop(iters);
    if (t.seconds() > seconds / 20 || iters > (int64_t(1) << 40)) {
      iters = std::max<int64_t>(1, int64_t(double(iters) * seconds / t.seconds()));
      break;
    }
    iters *= 4;
  }
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    Timer t;
    float s = 0;
#pragma omp parallel num_threads(threads) reduction(+ : s)
    s += loop(iters);
    best = std::max(best, flops_per_iter * double(iters) * threads / t.seconds());
    sink = sink + s;
  }
  return {name, best / 1e12, threads};
}

}  // namespace

std::vector<InstructionPeak> instruction_peaks(int threads, double seconds) {
  const CpuFeatures& f = cpu_features();
  std::vector<InstructionPeak> out;
  out.push_back(
      measure("fp32 FMA ymm (vfmadd231ps, AVX2)", kAcc * 8 * 2.0, fma_ymm, threads, seconds));
  if (f.avx512)
    out.push_back(
        measure("fp32 FMA zmm (vfmadd231ps, AVX-512)", kAcc * 16 * 2.0, fma_zmm, threads, seconds));
  if (f.avx512_bf16)
    out.push_back(measure("bf16 dot zmm (vdpbf16ps, AVX-512 BF16)", kAcc * 32 * 2.0, dot_bf16_zmm,
                          threads, seconds));
  if (isa_runs_here(Isa::Amx))
    out.push_back(
        measure("AMX tiles (tdpbf16ps)", 2 * 16 * 16 * 32 * 2.0, amx_tiles, threads, seconds));
  return out;
}

}  // namespace gemmax::cpu
