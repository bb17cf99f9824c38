// The host execution context of the kernels (kernels/kernel_base.h): one per thread of an
// emulated block. Warp collectives exchange values through the lanes' slots between two warp
// barriers; the tensor-core and asynchronous-copy instructions follow the PTX ISA's definitions
// (fragment layouts of mma.m16n8k16 and ldmatrix, cp.async groups completing at wait_group).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "gemmax/backend/cuda/emu/block_emulator.h"
#include "gemmax/backend/cuda/emu/emu_sm90.h"
#include "gemmax/backend/cuda/kernels/kernel_base.h"

namespace gemmax::emu {

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

class EmuExec {
 public:
  EmuExec(BlockEmulator& e, int thread, int threads, Dim3 block, Dim3 grid)
      : e_(e), t_(thread), n_(threads), block_(block), grid_(grid) {}

  int tid() const { return t_; }
  int nthreads() const { return n_; }
  uint32_t bx() const { return block_.x; }
  uint32_t by() const { return block_.y; }
  uint32_t bz() const { return block_.z; }
  uint32_t gx() const { return grid_.x; }
  uint32_t gy() const { return grid_.y; }
  uint32_t gz() const { return grid_.z; }
  int lane() const { return t_ % 32; }

  void sync() { e_.sync_block(t_); }
  void syncwarp() { e_.sync_warp(t_); }
  template <class T = char>
  T* smem() {
    return reinterpret_cast<T*>(e_.smem());
  }

  template <class T>
  T shfl_xor(T v, int mask) {
    return exchange(v, [&](int lane) { return lane ^ mask; });
  }
  template <class T>
  T shfl(T v, int src) {
    return exchange(v, [&](int) { return src & 31; });
  }
  uint32_t ballot(bool p) {
    put(uint32_t(p));
    uint32_t m = 0;
    for (int l = 0; l < 32; ++l) m |= get<uint32_t>(l) ? 1u << l : 0u;
    syncwarp();
    return m;
  }
  uint32_t match_any(int32_t v) {
    put(v);
    uint32_t m = 0;
    for (int l = 0; l < 32; ++l) m |= get<int32_t>(l) == v ? 1u << l : 0u;
    syncwarp();
    return m;
  }

  // Fibers never run at the same time: plain read-modify-writes are atomic.
  template <class T>
  T atomic_add(T* p, T v) {
    const T old = *p;
    *p = old + v;
    return old;
  }
  int32_t atomic_cas(int32_t* p, int32_t compare, int32_t v) {
    const int32_t old = *p;
    if (old == compare) *p = v;
    return old;
  }
  void fence() {}

  // ldmatrix.m8n8.x4(.trans).b16: lane l gives the address of row l % 8 of matrix l / 8.
  void ldmatrix_x4(uint32_t (&r)[4], const void* row) { ldmatrix<4>(r, row, false); }
  void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) { ldmatrix<4>(r, row, true); }
  void ldmatrix_x2(uint32_t (&r)[2], const void* row) { ldmatrix<2>(r, row, false); }
  void ldmatrix_x2_trans(uint32_t (&r)[2], const void* row) { ldmatrix<2>(r, row, true); }

  // mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32: d += a . b.
  void mma_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    struct Frag {
      uint32_t a[4], b[2];
    };
    put(Frag{{a[0], a[1], a[2], a[3]}, {b[0], b[1]}});
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; ++l) {
      const Frag f = get<Frag>(l);
      const int g = l >> 2, t = l & 3;
      for (int i = 0; i < 4; ++i) {  // a[i]: rows g (+8 if i odd), cols 2t (+8 if i >= 2)
        const int row = g + 8 * (i & 1), col = 2 * t + 8 * (i >> 1);
        A[row][col] = kern::unpack_lo(f.a[i]);
        A[row][col + 1] = kern::unpack_hi(f.a[i]);
      }
      for (int i = 0; i < 2; ++i) {  // b[i]: k rows 2t (+8 if i == 1), column g
        B[2 * t + 8 * i][g] = kern::unpack_lo(f.b[i]);
        B[2 * t + 8 * i + 1][g] = kern::unpack_hi(f.b[i]);
      }
    }
    syncwarp();
    const int g = lane() >> 2, t = lane() & 3;
    for (int i = 0; i < 4; ++i) {  // d[i]: row g (+8 if i >= 2), column 2t (+1 if i odd)
      const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
      float s = d[i];
      for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
      d[i] = s;
    }
  }

  // cp.async.cg 16 bytes (zero-filled when !valid); the copies of a commit group land when a
  // cp.async.wait_group lets that group complete.
  void cp_async16(void* dst, const void* src, bool valid) {
    Copy c;
    c.dst = dst;
    c.valid = valid;
    if (valid) std::memcpy(c.bytes, src, 16);  // global memory does not change within a kernel
    open_.push_back(c);
  }
  void cp_async_commit() {
    groups_.push_back(std::move(open_));
    open_.clear();
  }
  template <int N>
  void cp_async_wait() {
    while (int(groups_.size()) > N) {
      for (const Copy& c : groups_.front()) {
        if (c.valid)
          std::memcpy(c.dst, c.bytes, 16);
        else
          std::memset(c.dst, 0, 16);
      }
      groups_.erase(groups_.begin());
    }
  }

  // ---- Hopper (sm_90a): mbarrier, TMA, wgmma (emu_sm90.h) ----
  uint32_t shared_addr(const void* p) { return shared_offset(e_, p); }
  void mbarrier_init(uint64_t* bar, uint32_t count) { emu::mbarrier_init(e_, bar, count); }
  void mbarrier_arrive(uint64_t* bar) { mbarrier_change(e_, bar, 1, 0); }
  void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    mbarrier_change(e_, bar, 0, int32_t(bytes));  // the bytes are expected before the arrival
    mbarrier_change(e_, bar, 1, 0);
  }
  bool mbarrier_try_wait(uint64_t* bar, uint32_t parity) {
    return emu::mbarrier_try_wait(e_, bar, parity);
  }
  void mbarrier_wait(uint64_t* bar, uint32_t parity) {
    while (!mbarrier_try_wait(bar, parity)) e_.spin(t_);
  }
  void tma_load_2d(void* dst, const kern::TensorMap2d& map, int32_t c0, int32_t c1,
                   uint64_t* bar) {
    emu::tma_load_2d(e_, dst, map, c0, c1, bar);
  }
  void tma_load_3d(void* dst, const kern::TensorMap3d& map, int32_t c0, int32_t c1, int32_t c2,
                   uint64_t* bar) {
    emu::tma_load_3d(e_, dst, map, c0, c1, c2, bar);
  }
  // setmaxnreg: registers are not modelled; the PTX range is checked.
  template <int N>
  void setmaxnreg_inc() {
    static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg: 24 to 256, a multiple of 8");
  }
  template <int N>
  void setmaxnreg_dec() {
    static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg: 24 to 256, a multiple of 8");
  }
  void fence_proxy_async() {}  // one memory on the host: the proxies see the same bytes
  template <int N>
  void wgmma_fence_operand(float (&)[N]) {}  // a compiler barrier on the GPU only
  template <int N>
  void wgmma_fence_operand(uint32_t (&)[N]) {}
  void wgmma_fence() { wgmma_.fence(); }
  template <int N, bool kTransA = false, bool kTransB = false>
  void wgmma_bf16(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
    wgmma_.mma<N, kTransA, kTransB>(d, desc_a, desc_b, accumulate);
  }
  // The register-A form: a holds this thread's A fragment (mma.m16n8k16's layout within each
  // warp's 16 rows); the rows this thread's accumulators need are gathered from its quad here.
  template <int N, bool kTransB = false>
  void wgmma_bf16_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b, bool accumulate) {
    struct Frag {
      uint32_t a[4];
    };
    put(Frag{{a[0], a[1], a[2], a[3]}});
    float rows[2][16];
    const int g = lane() >> 2;
    for (int t = 0; t < 4; ++t) {
      const Frag f = get<Frag>(4 * g + t);
      for (int i = 0; i < 4; ++i) {  // a[i]: row g (+8 if i odd), columns 2t (+8 if i >= 2)
        rows[i & 1][2 * t + 8 * (i >> 1)] = kern::unpack_lo(f.a[i]);
        rows[i & 1][2 * t + 8 * (i >> 1) + 1] = kern::unpack_hi(f.a[i]);
      }
    }
    syncwarp();
    wgmma_.mma_rs<N, kTransB>(d, rows, desc_b, accumulate);
  }
  void wgmma_commit() { wgmma_.commit(); }
  template <int N>
  void wgmma_wait() {
    wgmma_.wait(e_, t_, N);
  }

 private:
  struct Copy {
    void* dst;
    bool valid;
    unsigned char bytes[16];
  };

  template <class T>
  void put(const T& v) {
    static_assert(sizeof(T) <= BlockEmulator::kSlotBytes);
    std::memcpy(e_.slot(t_), &v, sizeof(T));
    syncwarp();
  }
  template <class T>
  T get(int lane) {
    T v;
    std::memcpy(&v, e_.lane_slot(t_, lane), sizeof(T));
    return v;
  }
  template <class T, class F>
  T exchange(T v, F&& src_lane) {
    put(v);
    const T r = get<T>(src_lane(lane()));
    syncwarp();
    return r;
  }
  template <int N>
  void ldmatrix(uint32_t (&r)[N], const void* row, bool trans) {
    put(row);
    const int l = lane(), g = l >> 2, t = l & 3;
    for (int j = 0; j < N; ++j) {
      uint16_t h[2];
      for (int e = 0; e < 2; ++e) {
        // Not transposed: row g, columns 2t, 2t + 1. Transposed: rows 2t, 2t + 1, column g.
        const int src_row = trans ? 2 * t + e : g, col = trans ? g : 2 * t + e;
        const auto* p = static_cast<const uint16_t*>(get<const void*>(8 * j + src_row));
        h[e] = p[col];
      }
      r[j] = uint32_t(h[0]) | (uint32_t(h[1]) << 16);
    }
    syncwarp();
  }

  BlockEmulator& e_;
  int t_, n_;
  Dim3 block_, grid_;
  std::vector<Copy> open_;
  std::vector<std::vector<Copy>> groups_;
  WgmmaThread wgmma_;
};

}  // namespace gemmax::emu
