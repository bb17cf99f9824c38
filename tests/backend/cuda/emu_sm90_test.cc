// The Hopper instructions of the cuda emulator (emu/emu_sm90.h) on data small enough to check
// by hand: mbarrier phases, arrivals and transaction bytes; TMA boxes with their swizzle and
// out-of-bounds zeros (2-D and 3-D maps); wgmma's shared-memory descriptors, its register-A
// form and its warpgroup accumulator layout.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "gemmax/backend/cuda/emu/emu_exec.h"
#include "gemmax/base/dtype.h"
#include "gemmax/base/rng.h"
#include "test_util.h"

namespace gemmax {
namespace {

using emu::EmuExec;
using kern::Swizzle;

// Runs body(x) on every thread of one emulated block.
template <class F>
void run_block(int threads, size_t smem, F&& body) {
  emu::BlockEmulator& e = emu::block_emulator();
  e.run_block(threads, smem, [&](int t) {
    EmuExec x(e, t, threads, emu::Dim3{}, emu::Dim3{});
    body(x);
  });
}

uint16_t bits(float v) { return bf16(v).bits; }
float value(uint16_t h) { return float(bf16::from_bits(h)); }

TEST(Sm90Emulator, MbarrierPhaseCompletesOnceArrivalsAndBytesAreDone) {
  std::vector<int> seen;  // try_wait results in program order (fibers never overlap)
  run_block(64, 64, [&](EmuExec& x) {
    auto* bar = x.smem<uint64_t>();
    if (x.tid() == 0) x.mbarrier_init(bar, 2);
    x.sync();
    if (x.tid() == 0) {
      seen.push_back(x.mbarrier_try_wait(bar, 0));  // 0: nothing arrived
      x.mbarrier_arrive(bar);
      seen.push_back(x.mbarrier_try_wait(bar, 0));  // 0: one arrival of two
    }
    x.sync();
    if (x.tid() == 1) {
      x.mbarrier_arrive_expect_tx(bar, 16);
      seen.push_back(x.mbarrier_try_wait(bar, 0));  // 0: every arrival, 16 bytes pending
      const emu::Mbarrier m = emu::Mbarrier::load(bar);
      EXPECT_EQ(m.pending, 0u);
      EXPECT_EQ(m.tx, 16);
      EXPECT_EQ(m.parity, 0u);
      emu::mbarrier_change(emu::block_emulator(), bar, 0, -16);  // what a copy's complete_tx does
      seen.push_back(x.mbarrier_try_wait(bar, 0));               // 1: phase 0 completed
      seen.push_back(x.mbarrier_try_wait(bar, 1));               // 0: phase 1 is the current one
      const emu::Mbarrier n = emu::Mbarrier::load(bar);
      EXPECT_EQ(n.pending, 2u);  // reset to the init count
      EXPECT_EQ(n.parity, 1u);
    }
    x.sync();
    x.mbarrier_wait(bar, 0);  // returns at once: phase 0 is done
    // Parity tells only the current phase from the one before: a thread still to test phase 0
    // once phase 1 had completed would wait for phase 2. Everyone tests it first.
    x.sync();
    if (x.tid() < 2) x.mbarrier_arrive(bar);
    x.mbarrier_wait(bar, 1);  // every thread waits for both arrivals of phase 1
    if (x.tid() == 63) seen.push_back(x.mbarrier_try_wait(bar, 1));
  });
  EXPECT_EQ(seen, (std::vector<int>{0, 0, 0, 1, 0, 1}));
}

TEST(Sm90Emulator, MbarrierMisuseIsAnError) {
  testing::expect_error(
      [] { run_block(32, 64, [](EmuExec& x) { x.mbarrier_arrive(x.smem<uint64_t>()); }); },
      {"mbarrier", "before mbarrier.init"});
  testing::expect_error(
      [] {
        run_block(32, 64, [](EmuExec& x) {
          auto* bar = x.smem<uint64_t>();
          if (x.tid() == 0) x.mbarrier_init(bar, 1);
          x.sync();
          if (x.tid() == 0) x.mbarrier_arrive(bar);  // phase 0 completes
          x.sync();
          if (x.tid() == 0) {
            x.mbarrier_wait(bar, 0);
            x.mbarrier_wait(bar, 1);  // the second phase needs one more arrival: never
          }
        });
      },
      {"deadlocked", "mbarrier phase"});
  testing::expect_error(
      [] { run_block(32, 64, [](EmuExec& x) { x.mbarrier_init(x.smem<uint64_t>(), 0); }); },
      {"mbarrier.init", "count of 0"});
}

// A 5 x 40 bfloat16 tensor (rows 96 bytes apart) whose elements are 40 r + c, exact in bfloat16.
struct Tensor5x40 {
  alignas(16) uint16_t data[5 * 48];
  Tensor5x40() {
    for (int r = 0; r < 5; ++r)
      for (int c = 0; c < 48; ++c) data[r * 48 + c] = bits(c < 40 ? float(40 * r + c) : -1.f);
  }
  static float at(int r, int c) { return r >= 0 && r < 5 && c >= 0 && c < 40 ? 40 * r + c : 0; }
};

TEST(Sm90Emulator, TmaBoxIsSwizzledZeroFilledAndLandsAtTheWait) {
  Tensor5x40 g;
  kern::TensorMap2d map;
  ASSERT_EQ(kern::make_tensor_map_2d(&map, g.data, 2, 40, 5, 96, 64, 8, Swizzle::k128B), nullptr);
  std::vector<uint16_t> before(8 * 64), after(8 * 64);
  run_block(32, 2048 + 8, [&](EmuExec& x) {
    auto* box = x.smem<uint16_t>();
    auto* bar = reinterpret_cast<uint64_t*>(x.smem() + 2048);
    if (x.tid() == 0) {
      x.mbarrier_init(bar, 1);
      x.mbarrier_arrive_expect_tx(bar, 8 * 64 * 2);
      x.tma_load_2d(box, map, 16, -1, bar);  // columns 16..79, rows -1..6
      std::memcpy(before.data(), box, before.size() * 2);
    }
    x.sync();
    x.mbarrier_wait(bar, 0);
    if (x.tid() == 0) std::memcpy(after.data(), box, after.size() * 2);
  });
  for (uint16_t h : before) ASSERT_EQ(h, 0xffff) << "the box landed before the wait";
  // By hand: row 1 of the box (tensor row 0) keeps its 16-byte chunk 0 at chunk 0 ^ 1 = 1, so
  // element (1, 0) = tensor (0, 16) = 16 sits at byte 128 + 16; (2, 9) = tensor (1, 25) = 65 in
  // chunk 1 ^ 2 = 3, element 1: byte 256 + 48 + 2.
  EXPECT_EQ(value(after[(128 + 16) / 2]), 16.f);
  EXPECT_EQ(value(after[(256 + 48 + 2) / 2]), 65.f);
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 64; ++c) {
      const uint32_t at = kern::swizzle_address(uint32_t(r * 128 + c * 2), Swizzle::k128B);
      ASSERT_EQ(value(after[at / 2]), Tensor5x40::at(r - 1, 16 + c)) << r << ", " << c;
    }

  // Unswizzled, a box 8 columns wide: rows 16 bytes apart.
  ASSERT_EQ(kern::make_tensor_map_2d(&map, g.data, 2, 40, 5, 96, 8, 3, Swizzle::kNone), nullptr);
  run_block(32, 256, [&](EmuExec& x) {
    auto* bar = reinterpret_cast<uint64_t*>(x.smem() + 128);
    if (x.tid() == 0) {
      x.mbarrier_init(bar, 1);
      x.mbarrier_arrive_expect_tx(bar, 3 * 8 * 2);
      x.tma_load_2d(x.smem(), map, 36, 3, bar);
    }
    x.sync();
    x.mbarrier_wait(bar, 0);
    if (x.tid() == 0) std::memcpy(after.data(), x.smem(), 48);
  });
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 8; ++c) EXPECT_EQ(value(after[r * 8 + c]), Tensor5x40::at(3 + r, 36 + c));
}

// A 3-D map as attention reads K: [B = 2, S = 5, KV = 3, hd = 64] as {KV * hd, S, B}. The box
// of kv head 1, keys 2..9 of sequence 1 lands as 8 swizzled rows: keys 2..4, then zeros (past
// the sequence's end: not the next sequence's keys, not past the tensor).
TEST(Sm90Emulator, Tma3dLandsOneHeadOfOneSequence) {
  std::vector<uint16_t> g(2 * 5 * 3 * 64);
  for (size_t i = 0; i < g.size(); ++i) g[i] = bits(float(i % 251));
  kern::TensorMap3d map;
  ASSERT_EQ(kern::make_tensor_map_3d(&map, g.data(), 2, {3 * 64, 5, 2},
                                     {3 * 64 * 2, 5 * 3 * 64 * 2}, {64, 8, 1}, Swizzle::k128B),
            nullptr);
  std::vector<uint16_t> after(8 * 64);
  run_block(32, 1024 + 8, [&](EmuExec& x) {
    auto* bar = reinterpret_cast<uint64_t*>(x.smem() + 1024);
    if (x.tid() == 0) {
      x.mbarrier_init(bar, 1);
      x.mbarrier_arrive_expect_tx(bar, 8 * 64 * 2);
      x.tma_load_3d(x.smem(), map, 64, 2, 1, bar);
    }
    x.sync();
    x.mbarrier_wait(bar, 0);
    if (x.tid() == 0) std::memcpy(after.data(), x.smem(), after.size() * 2);
  });
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 64; ++c) {
      const uint32_t at = kern::swizzle_address(uint32_t(r * 128 + c * 2), Swizzle::k128B);
      const float want = r + 2 < 5 ? float(((1 * 5 + r + 2) * 3 * 64 + 64 + c) % 251) : 0.f;
      ASSERT_EQ(value(after[at / 2]), want) << r << ", " << c;
    }
  EXPECT_STREQ(kern::make_tensor_map_3d(&map, g.data(), 2, {3 * 64, 5, 2}, {3 * 64 * 2, 8},
                                        {64, 8, 1}, Swizzle::k128B),
               "a stride is not a multiple of 16 bytes below 2^40");
}

TEST(Sm90Emulator, TensorMapLimitsAreNamed) {
  Tensor5x40 g;
  kern::TensorMap2d map;
  EXPECT_STREQ(kern::make_tensor_map_2d(&map, g.data, 2, 40, 5, 80 + 2, 64, 8, Swizzle::k128B),
               "the row stride is not a multiple of 16 bytes");
  EXPECT_STREQ(kern::make_tensor_map_2d(&map, g.data, 2, 40, 5, 96, 128, 8, Swizzle::k128B),
               "the box row is wider than the swizzle span");
  EXPECT_STREQ(kern::make_tensor_map_2d(&map, g.data + 1, 2, 40, 5, 96, 64, 8, Swizzle::k128B),
               "the global address is not 16-byte aligned");
}

// Writes element (row, k) of a K-major operand in the 128-byte swizzle: rows 128 bytes apart.
void put_sw128(uint16_t* tile, int row, int k, float v) {
  tile[kern::swizzle_address(uint32_t(row * 128 + k * 2), Swizzle::k128B) / 2] = bits(v);
}

// A = "k == m % 16" (64 x 16), B(n, k) = 16 n + k (8 x 16): D(m, n) = B(n, m % 16), so every
// accumulator register names its own row and column.
TEST(Sm90Emulator, WgmmaAccumulatorLayoutOfAWarpgroup) {
  std::vector<std::vector<float>> d(128);
  std::vector<float> pending(4);
  run_block(128, 8192 + 1024, [&](EmuExec& x) {
    auto* a = x.smem<uint16_t>();
    auto* b = reinterpret_cast<uint16_t*>(x.smem() + 8192);
    if (x.tid() == 0) {
      for (int m = 0; m < 64; ++m)
        for (int k = 0; k < 16; ++k) put_sw128(a, m, k, k == m % 16 ? 1.f : 0.f);
      for (int n = 0; n < 8; ++n)
        for (int k = 0; k < 16; ++k) put_sw128(b, n, k, float(16 * n + k));
    }
    x.sync();
    float acc[4] = {-1, -1, -1, -1};
    x.wgmma_fence();
    x.wgmma_bf16<8>(acc, kern::wgmma_desc(x.shared_addr(a), 16, 1024, Swizzle::k128B),
                    kern::wgmma_desc(x.shared_addr(b), 16, 1024, Swizzle::k128B), false);
    x.wgmma_commit();
    if (x.tid() == 37) std::copy(acc, acc + 4, pending.begin());
    x.wgmma_wait<0>();
    d[x.tid()].assign(acc, acc + 4);
  });
  EXPECT_EQ(pending, (std::vector<float>{-1, -1, -1, -1})) << "results before wgmma.wait_group";
  // Thread 37: warp 1, lane 5 (group 1, quad 1): rows 16 + 1 and 16 + 9, columns 2 and 3.
  EXPECT_EQ(d[37], (std::vector<float>{2 * 16 + 1, 3 * 16 + 1, 2 * 16 + 9, 3 * 16 + 9}));
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < 4; ++i) {
      const int m = kern::wgmma_acc_row(t, i), n = kern::wgmma_acc_col(t, i);
      ASSERT_EQ(d[t][i], float(16 * n + m % 16)) << "thread " << t << " register " << i;
    }
}

// The grouped matmul's use: a 64 x 64 by 128 x 64 product in four k16 steps, each descriptor
// starting 32 bytes further into the swizzled rows, accumulating; against fp64 loops.
TEST(Sm90Emulator, WgmmaStepsAlongKInsideTheSwizzleAtom) {
  Rng rng(5);
  std::vector<float> A(64 * 64), B(128 * 64);
  for (float& v : A) v = float(bf16(rng.normal()));
  for (float& v : B) v = float(bf16(rng.normal()));
  std::vector<std::vector<float>> d(128);
  run_block(128, 8192 + 16384, [&](EmuExec& x) {
    auto* a = x.smem<uint16_t>();
    auto* b = reinterpret_cast<uint16_t*>(x.smem() + 8192);
    if (x.tid() == 0) {
      for (int m = 0; m < 64; ++m)
        for (int k = 0; k < 64; ++k) put_sw128(a, m, k, A[m * 64 + k]);
      for (int n = 0; n < 128; ++n)
        for (int k = 0; k < 64; ++k) put_sw128(b, n, k, B[n * 64 + k]);
    }
    x.sync();
    float acc[64] = {};
    x.wgmma_fence();
    for (int kk = 0; kk < 64; kk += 16)
      x.wgmma_bf16<128>(acc, kern::wgmma_desc(x.shared_addr(a) + 2 * kk, 16, 1024, Swizzle::k128B),
                        kern::wgmma_desc(x.shared_addr(b) + 2 * kk, 16, 1024, Swizzle::k128B),
                        kk > 0);
    x.wgmma_commit();
    x.wgmma_wait<0>();
    d[x.tid()].assign(acc, acc + 64);
  });
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < 64; ++i) {
      const int m = kern::wgmma_acc_row(t, i), n = kern::wgmma_acc_col(t, i);
      double want = 0;
      for (int k = 0; k < 64; ++k) want += double(A[m * 64 + k]) * B[n * 64 + k];
      ASSERT_NEAR(d[t][i], want, 1e-4 * (1 + std::abs(want))) << m << ", " << n;
    }
}

// The plain (unswizzled) layout: 8 x 16-byte core matrices, leading_bytes apart along k and
// stride_bytes apart along the rows.
TEST(Sm90Emulator, WgmmaReadsTheUnswizzledCoreMatrixLayout) {
  const kern::WgmmaDescFields f =
      kern::wgmma_desc_fields(kern::wgmma_desc(4096, 128, 256, Swizzle::kNone));
  EXPECT_EQ(f.start, 4096u);
  EXPECT_EQ(f.leading_bytes, 128u);
  EXPECT_EQ(f.stride_bytes, 256u);
  EXPECT_EQ(f.swizzle, Swizzle::kNone);
  // (row 11, k 9): row group 1, row 3 of its core matrix, core matrix 1 along k, element 1.
  EXPECT_EQ(emu::wgmma_operand_offset(f, 11, 9), 4096u + 256 + 3 * 16 + 128 + 2);
  const kern::WgmmaDescFields s =
      kern::wgmma_desc_fields(kern::wgmma_desc(2048 + 32, 16, 1024, Swizzle::k128B));
  EXPECT_EQ(s.swizzle, Swizzle::k128B);
  // (row 10, k 3) from 32 bytes in: byte 2048 + 1024 + 2 * 128 + 32 + 6, chunk 2 ^ 2 = 0.
  EXPECT_EQ(emu::wgmma_operand_offset(s, 10, 3), 2048u + 1024 + 256 + 6);
}

// The MN-major layouts (imm-trans 1), by hand. 128-byte swizzle: rows contiguous, 64 per span;
// each k one span (128 bytes) further; 8-k groups stride_bytes apart, 64-row blocks
// leading_bytes apart. Plain: 8 x 8 core matrices with the rows contiguous.
TEST(Sm90Emulator, WgmmaReadsTheMnMajorLayouts) {
  const kern::WgmmaDescFields s =
      kern::wgmma_desc_fields(kern::wgmma_desc(2048, 8192, 1024, Swizzle::k128B));
  // (row 70, k 11): row block 1 (8192), k group 1 (1024), k 3 of the group (3 * 128), row 6 of
  // the span (12): byte 11660, in 128-byte row 91 = 3 mod 8, so its chunk 0 moves to 0 ^ 3 = 3.
  EXPECT_EQ(emu::wgmma_operand_offset(s, 70, 11, true), 2048u + 8192 + 1024 + 384 + 48 + 12);
  EXPECT_EQ(emu::wgmma_operand_offset(s, 0, 0, true), 2048u);
  // (row 9, k 1): byte 2048 + 128 + 18 in row 1: chunk 1 ^ 1 = 0, byte 2 of it.
  EXPECT_EQ(emu::wgmma_operand_offset(s, 9, 1, true), 2048u + 128 + 2);
  const kern::WgmmaDescFields p =
      kern::wgmma_desc_fields(kern::wgmma_desc(4096, 128, 256, Swizzle::kNone));
  // (row 11, k 9): row group 1 (256), k group 1 (128), k 1 of the core matrix (16), row 3 (6).
  EXPECT_EQ(emu::wgmma_operand_offset(p, 11, 9, true), 4096u + 256 + 128 + 16 + 6);
  // The same element K-major: row 3 of its core matrix (48), k 1 of its row (2).
  EXPECT_EQ(emu::wgmma_operand_offset(p, 11, 9, false), 4096u + 256 + 128 + 48 + 2);
}

// Element (row, k) of an MN-major operand in the 128-byte swizzle: 64-row blocks `block_bytes`
// apart, k rows of 128 bytes (so 8-k groups 1024 bytes apart).
void put_mn128(uint16_t* tile, int block_bytes, int row, int k, float v) {
  const uint32_t at = uint32_t(row / 64 * block_bytes + k * 128 + row % 64 * 2);
  tile[kern::swizzle_address(at, Swizzle::k128B) / 2] = bits(v);
}

// The backward's use: a 64 x 128 product over k = 64 in four k16 steps with A and B MN-major
// (the start 16 k rows = 2048 bytes further each step, B's two 64-row blocks 8192 bytes apart),
// and the same A K-major with B MN-major. Small integers: every sum is exact.
TEST(Sm90Emulator, WgmmaTransposeBitsReadMnMajorOperands) {
  auto A = [](int m, int k) { return float((m + 2 * k) % 5 - 2); };
  auto B = [](int n, int k) { return float((3 * n + k) % 7 - 3); };
  for (bool a_mn : {true, false}) {
    std::vector<std::vector<float>> d(128);
    run_block(128, 8192 + 16384, [&](EmuExec& x) {
      auto* a = x.smem<uint16_t>();
      auto* b = reinterpret_cast<uint16_t*>(x.smem() + 8192);
      if (x.tid() == 0) {
        for (int m = 0; m < 64; ++m)
          for (int k = 0; k < 64; ++k)
            a_mn ? put_mn128(a, 8192, m, k, A(m, k)) : put_sw128(a, m, k, A(m, k));
        for (int n = 0; n < 128; ++n)
          for (int k = 0; k < 64; ++k) put_mn128(b, 8192, n, k, B(n, k));
      }
      x.sync();
      float acc[64] = {};
      x.wgmma_fence();
      const uint32_t a0 = x.shared_addr(a), b0 = x.shared_addr(b);
      for (int kk = 0; kk < 64; kk += 16) {
        const uint64_t db = kern::wgmma_desc(b0 + kk * 128, 8192, 1024, Swizzle::k128B);
        if (a_mn)
          x.wgmma_bf16<128, true, true>(
              acc, kern::wgmma_desc(a0 + kk * 128, 8192, 1024, Swizzle::k128B), db, kk > 0);
        else
          x.wgmma_bf16<128, false, true>(
              acc, kern::wgmma_desc(a0 + kk * 2, 16, 1024, Swizzle::k128B), db, kk > 0);
      }
      x.wgmma_commit();
      x.wgmma_wait<0>();
      d[x.tid()].assign(acc, acc + 64);
    });
    for (int t = 0; t < 128; ++t)
      for (int i = 0; i < 64; ++i) {
        const int m = kern::wgmma_acc_row(t, i), n = kern::wgmma_acc_col(t, i);
        float want = 0;
        for (int k = 0; k < 64; ++k) want += A(m, k) * B(n, k);
        ASSERT_EQ(d[t][i], want) << (a_mn ? "A MN-major " : "A K-major ") << m << ", " << n;
      }
  }
}

// The register-A form (attention's P V): each warp's 16 rows of A in mma.m16n8k16's A fragment
// (a[0] row g, columns 2t, 2t + 1; a[1] row g + 8; a[2], a[3] the same 8 columns further), B
// MN-major from shared memory (64 x 16, one 128-byte swizzled row per k), against fp64.
TEST(Sm90Emulator, WgmmaRegisterAReadsTheMmaFragment) {
  Rng rng(7);
  std::vector<float> A(64 * 16), B(16 * 64);  // A[m][k], B[k][n]
  for (float& v : A) v = float(bf16(rng.normal()));
  for (float& v : B) v = float(bf16(rng.normal()));
  std::vector<std::vector<float>> d(128);
  run_block(128, 2048, [&](EmuExec& x) {
    auto* b = x.smem<uint16_t>();
    if (x.tid() == 0)
      for (int k = 0; k < 16; ++k)
        for (int n = 0; n < 64; ++n) put_sw128(b, k, n, B[k * 64 + n]);  // row k, n along it
    x.sync();
    const int w = x.tid() / 32, g = x.lane() / 4, t = x.lane() % 4;
    uint32_t a[4];
    for (int i = 0; i < 4; ++i) {
      const int m = 16 * w + g + 8 * (i & 1), k = 2 * t + 8 * (i >> 1);
      a[i] = kern::pack_bf16(A[m * 16 + k], A[m * 16 + k + 1]);
    }
    float acc[32];
    for (float& v : acc) v = 1000;  // dropped: accumulate is false
    x.wgmma_fence();
    x.wgmma_bf16_rs<64, true>(
        acc, a, kern::wgmma_desc(x.shared_addr(b), 8192, 1024, Swizzle::k128B), false);
    x.wgmma_commit();
    x.wgmma_wait<0>();
    d[x.tid()].assign(acc, acc + 32);
  });
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < 32; ++i) {
      const int m = kern::wgmma_acc_row(t, i), n = kern::wgmma_acc_col(t, i);
      double want = 0;
      for (int k = 0; k < 16; ++k) want += double(A[m * 16 + k]) * B[k * 64 + n];
      ASSERT_NEAR(d[t][i], want, 1e-4 * (1 + std::abs(want))) << m << ", " << n;
    }
}

TEST(Sm90Emulator, WgmmaWithoutFenceIsAnError) {
  testing::expect_error(
      [] {
        run_block(128, 4096, [](EmuExec& x) {
          float acc[4] = {};
          x.wgmma_bf16<8>(acc, kern::wgmma_desc(0, 16, 1024, Swizzle::k128B),
                          kern::wgmma_desc(0, 16, 1024, Swizzle::k128B), false);
        });
      },
      {"wgmma.mma_async without a wgmma.fence"});
}

}  // namespace
}  // namespace gemmax
