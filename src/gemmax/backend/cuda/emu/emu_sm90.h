// The Hopper instructions of the host execution context (EmuExec), from the PTX ISA's
// definitions:
//   - mbarrier: an 8-byte object in shared memory with an expected arrival count, the arrivals
//     pending in the current phase, a transaction count and the phase's parity. A phase completes
//     when no arrival and no transaction byte is pending; the parity then flips and the pending
//     arrivals are reset to the expected count. try_wait.parity(p) succeeds once the phase of
//     parity p has completed.
//   - TMA (cp.async.bulk.tensor.2d/.3d ... mbarrier::complete_tx::bytes): a box of a TensorMap2d
//     or TensorMap3d into shared memory, swizzled, zeros outside the tensor; it lands, and
//     completes its bytes on its mbarrier, when a thread waits on that barrier.
//   - wgmma.mma_async m64nNk16 .f32.bf16.bf16 with both operands in shared memory (through
//     matrix descriptors, each K-major or, with its imm-trans bit, MN-major), or A in registers
//     (the A fragment of mma.m16n8k16 per warp, warp w holding rows 16 w ..): recorded per thread
//     and carried out, in commit-group order, when wgmma.wait_group lets the group complete, so
//     that shared memory overwritten before the wait, or accumulators read before it, give wrong
//     results as they would on the GPU.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "gemmax/backend/cuda/emu/block_emulator.h"
#include "gemmax/backend/cuda/kernels/sm90_types.h"
#include "gemmax/base/error.h"

namespace gemmax::emu {

// The state of an mbarrier, packed in its 64 bits: expected arrivals (bits 0-19), pending
// arrivals (20-39), transaction count (40-60, two's complement), phase parity (61) and a tag
// (62-63 = 01) that tells an initialised barrier from the 0xff bytes shared memory starts with.
struct Mbarrier {
  uint32_t expected = 0, pending = 0, parity = 0;
  int32_t tx = 0;

  static constexpr uint64_t kTag = uint64_t(1) << 62;
  static Mbarrier load(const uint64_t* bar) {
    const uint64_t v = *bar;
    GEMMAX_CHECK((v >> 62) == 1,
                 "emulated mbarrier used before mbarrier.init (or not an mbarrier)");
    Mbarrier m;
    m.expected = uint32_t(v & 0xfffff);
    m.pending = uint32_t((v >> 20) & 0xfffff);
    const uint32_t tx = uint32_t((v >> 40) & 0x1fffff);
    m.tx = int32_t(tx << 11) >> 11;
    m.parity = uint32_t((v >> 61) & 1);
    return m;
  }
  void store(uint64_t* bar) const {
    *bar = uint64_t(expected) | (uint64_t(pending) << 20) |
           (uint64_t(uint32_t(tx) & 0x1fffff) << 40) | (uint64_t(parity) << 61) | kTag;
  }
  // The current phase completes once nothing is pending.
  void settle() {
    if (pending == 0 && tx == 0) {
      parity ^= 1;
      pending = expected;
    }
  }
};

inline void mbarrier_init(BlockEmulator& e, uint64_t* bar, uint32_t count) {
  GEMMAX_CHECK(count >= 1 && count < (1u << 20), "mbarrier.init with an arrival count of ", count,
               " (PTX: 1 to 2^20 - 1)");
  Mbarrier m;
  m.expected = m.pending = count;
  m.store(bar);
  e.note_progress();
}

inline void mbarrier_change(BlockEmulator& e, uint64_t* bar, uint32_t arrivals, int32_t tx) {
  Mbarrier m = Mbarrier::load(bar);
  GEMMAX_CHECK(arrivals <= m.pending, "mbarrier: ", arrivals, " arrivals with ", m.pending,
               " pending in this phase (more arrivals than mbarrier.init's count)");
  m.pending -= arrivals;
  m.tx += tx;
  GEMMAX_CHECK(m.tx > -(1 << 20) && m.tx < (1 << 20), "mbarrier transaction count ", m.tx,
               " outside the PTX range (+-(2^20 - 1))");
  m.settle();
  m.store(bar);
  e.note_progress();
}

// try_wait.parity: lands the copies that complete on this barrier, then tests the phase.
inline bool mbarrier_try_wait(BlockEmulator& e, uint64_t* bar, uint32_t parity) {
  e.land_async_copies(bar);
  return Mbarrier::load(bar).parity != (parity & 1);
}

inline uint32_t shared_offset(BlockEmulator& e, const void* p) {
  const char* c = static_cast<const char*>(p);
  GEMMAX_CHECK(c >= e.smem() && c <= e.smem() + e.smem_bytes(),
               "an emulated shared-memory instruction got an address outside shared memory");
  return uint32_t(c - e.smem());
}

// cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [dst],
// [map, {c0, c1}], [bar]: c0 is the column (inner) coordinate, c1 the row.
inline void tma_load_2d(BlockEmulator& e, void* dst, const kern::TensorMap2d& map, int32_t c0,
                        int32_t c1, uint64_t* bar) {
  const uint32_t at = shared_offset(e, dst);
  const int64_t row_bytes = int64_t(map.box[0]) * map.elem_bytes;
  const int64_t bytes = row_bytes * map.box[1];
  GEMMAX_CHECK(at % 128 == 0, "TMA destination at shared offset ", at,
               " is not 128-byte aligned (PTX requires it)");
  GEMMAX_CHECK(size_t(at + bytes) <= e.smem_bytes(), "TMA box of ", bytes, " bytes at shared offset ", at,
               " runs past the block's ", e.smem_bytes(), " bytes of shared memory");
  shared_offset(e, bar);
  e.issue_async_copy(bar, [&e, map, c0, c1, at, row_bytes, bytes, bar] {
    const auto* g = static_cast<const char*>(map.base);
    for (int32_t r = 0; r < map.box[1]; ++r) {
      const int64_t row = int64_t(c1) + r;
      for (int32_t c = 0; c < map.box[0]; ++c) {
        const int64_t col = int64_t(c0) + c;
        const uint32_t to = kern::swizzle_address(
            uint32_t(at + r * row_bytes + int64_t(c) * map.elem_bytes), map.swizzle);
        char* d = e.smem() + to;
        if (row >= 0 && row < map.dims[1] && col >= 0 && col < map.dims[0])
          std::memcpy(d, g + row * map.row_bytes + col * map.elem_bytes, size_t(map.elem_bytes));
        else
          std::memset(d, 0, size_t(map.elem_bytes));
      }
    }
    mbarrier_change(e, bar, 0, -int32_t(bytes));
  });
}

// cp.async.bulk.tensor.3d ... [dst], [map, {c0, c1, c2}], [bar]: the box's planes land one
// after another, each as box[1] rows.
inline void tma_load_3d(BlockEmulator& e, void* dst, const kern::TensorMap3d& map, int32_t c0,
                        int32_t c1, int32_t c2, uint64_t* bar) {
  const uint32_t at = shared_offset(e, dst);
  const int64_t row_bytes = int64_t(map.box[0]) * map.elem_bytes;
  const int64_t bytes = row_bytes * map.box[1] * map.box[2];
  GEMMAX_CHECK(at % 128 == 0, "TMA destination at shared offset ", at,
               " is not 128-byte aligned (PTX requires it)");
  GEMMAX_CHECK(size_t(at + bytes) <= e.smem_bytes(), "TMA box of ", bytes,
               " bytes at shared offset ", at, " runs past the block's ", e.smem_bytes(),
               " bytes of shared memory");
  shared_offset(e, bar);
  e.issue_async_copy(bar, [&e, map, c0, c1, c2, at, row_bytes, bytes, bar] {
    const auto* g = static_cast<const char*>(map.base);
    for (int32_t z = 0; z < map.box[2]; ++z) {
      const int64_t plane = int64_t(c2) + z;
      for (int32_t r = 0; r < map.box[1]; ++r) {
        const int64_t row = int64_t(c1) + r, out_row = int64_t(z) * map.box[1] + r;
        for (int32_t c = 0; c < map.box[0]; ++c) {
          const int64_t col = int64_t(c0) + c;
          char* d = e.smem() + kern::swizzle_address(
                                   uint32_t(at + out_row * row_bytes + int64_t(c) * map.elem_bytes),
                                   map.swizzle);
          if (plane >= 0 && plane < map.dims[2] && row >= 0 && row < map.dims[1] && col >= 0 &&
              col < map.dims[0])
            std::memcpy(d, g + plane * map.strides[1] + row * map.strides[0] + col * map.elem_bytes,
                        size_t(map.elem_bytes));
          else
            std::memset(d, 0, size_t(map.elem_bytes));
        }
      }
    }
    mbarrier_change(e, bar, 0, -int32_t(bytes));
  });
}

// The byte offset in shared memory of element (row, k) of a bfloat16 operand that a wgmma
// descriptor describes (rows along M or N, k along the reduction), in the PTX ISA's canonical
// layouts (the 16-byte unit is 8 elements; a swizzle span is 32, 64 or 128 bytes):
//   - K-major (imm-trans 0): 8-row groups are stride_bytes apart; within a group, swizzled
//     layouts have rows one span apart and k contiguous, the plain layout has 8 x 16-byte core
//     matrices (rows of 8 k), leading_bytes apart along k;
//   - MN-major (imm-trans 1): rows are contiguous. Swizzled: a span of rows holds one k, the next
//     k one span further, 8 k per atom; 8-k groups are stride_bytes apart and span-wide blocks of
//     rows leading_bytes apart. Plain: core matrices of 8 k by 8 rows (16 bytes), 8-row groups
//     stride_bytes apart and 8-k groups leading_bytes apart.
inline uint32_t wgmma_operand_offset(const kern::WgmmaDescFields& f, int row, int k,
                                     bool mn_major = false) {
  const uint32_t r = uint32_t(row), kk = uint32_t(k);
  uint32_t a = f.start;
  if (!mn_major) {
    a += r / 8 * f.stride_bytes;
    if (f.swizzle == kern::Swizzle::kNone)
      a += r % 8 * 16 + kk / 8 * f.leading_bytes + kk % 8 * 2;
    else
      a += r % 8 * uint32_t(kern::swizzle_bytes(f.swizzle)) + kk * 2;
  } else if (f.swizzle == kern::Swizzle::kNone) {
    a += r / 8 * f.stride_bytes + kk / 8 * f.leading_bytes + kk % 8 * 16 + r % 8 * 2;
  } else {
    const uint32_t span = uint32_t(kern::swizzle_bytes(f.swizzle)), per_span = span / 2;
    a += r / per_span * f.leading_bytes + kk / 8 * f.stride_bytes + kk % 8 * span +
         r % per_span * 2;
  }
  return kern::swizzle_address(a, f.swizzle);
}

// The wgmma state of one thread: operations issued, and groups committed, not yet waited for.
class WgmmaThread {
 public:
  void fence() { fenced_ = true; }
  template <int N, bool kTransA = false, bool kTransB = false>
  void mma(float* d, uint64_t desc_a, uint64_t desc_b, bool accumulate) {
    static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma .m64nNk16: N is a multiple of 8 to 256");
    GEMMAX_CHECK(fenced_,
                 "wgmma.mma_async without a wgmma.fence before it (PTX requires one "
                 "before the first wgmma and after touching the accumulators)");
    open_.push_back({d, N, desc_a, desc_b, accumulate, kTransA, kTransB, false, {}});
  }
  // The register-A form: `rows` are this thread's two rows of A (16 k each), gathered from its
  // quad by the caller (EmuExec) when the instruction issues.
  template <int N, bool kTransB = false>
  void mma_rs(float* d, const float (&rows)[2][16], uint64_t desc_b, bool accumulate) {
    static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma .m64nNk16: N is a multiple of 8 to 256");
    GEMMAX_CHECK(fenced_,
                 "wgmma.mma_async without a wgmma.fence before it (PTX requires one "
                 "before the first wgmma and after touching the accumulators or A registers)");
    Op op{d, N, 0, desc_b, accumulate, false, kTransB, true, {}};
    std::memcpy(op.a_rows, rows, sizeof(op.a_rows));
    open_.push_back(op);
  }
  void commit() {
    groups_.push_back(std::move(open_));
    open_.clear();
  }
  // wgmma.wait_group n: carries out the oldest groups until at most n are pending.
  void wait(BlockEmulator& e, int thread, int n) {
    while (int(groups_.size()) > n) {
      for (const Op& op : groups_.front()) run(e, thread, op);
      groups_.erase(groups_.begin());
    }
    fenced_ = false;
  }

 private:
  struct Op {
    float* d;
    int n;
    uint64_t desc_a, desc_b;
    bool accumulate, trans_a, trans_b;  // imm-trans-a, imm-trans-b: MN-major operands
    bool a_in_registers;
    float a_rows[2][16];  // the register-A form: this thread's rows g and g + 8 of A
  };
  static float operand(BlockEmulator& e, const kern::WgmmaDescFields& f, int row, int k,
                       bool mn_major) {
    const uint32_t at = wgmma_operand_offset(f, row, k, mn_major);
    GEMMAX_CHECK(at + 2 <= e.smem_bytes(), "wgmma operand element at shared offset ", at,
                 " is past the block's shared memory");
    uint16_t h;
    std::memcpy(&h, e.smem() + at, 2);
    return float(bf16::from_bits(h));
  }
  static void run(BlockEmulator& e, int thread, const Op& op) {
    const kern::WgmmaDescFields a = kern::wgmma_desc_fields(op.desc_a),
                                b = kern::wgmma_desc_fields(op.desc_b);
    GEMMAX_CHECK((op.a_in_registers || a.base_offset == 0) && b.base_offset == 0,
                 "wgmma descriptors with a base offset are not emulated (start each swizzle "
                 "pattern on its alignment)");
    const int tig = thread % 128;
    for (int i = 0; i < op.n / 2; ++i) {
      const int row = kern::wgmma_acc_row(tig, i), col = kern::wgmma_acc_col(tig, i);
      float s = op.accumulate ? op.d[i] : 0.f;  // in k order, as the mma.sync emulation sums
      for (int k = 0; k < 16; ++k)
        s += (op.a_in_registers ? op.a_rows[(i & 3) >> 1][k] : operand(e, a, row, k, op.trans_a)) *
             operand(e, b, col, k, op.trans_b);
      op.d[i] = s;
    }
  }

  bool fenced_ = false;
  std::vector<Op> open_;
  std::vector<std::vector<Op>> groups_;
};

}  // namespace gemmax::emu
