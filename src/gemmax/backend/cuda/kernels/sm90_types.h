// What the Hopper (sm_90a) instructions of the execution contexts take, shared by the GPU
// (exec_device.cuh: inline PTX) and the host emulator (emu/emu_sm90.h: the PTX ISA's
// definitions):
//   - TensorMap2d, the tensor map of a TMA copy (cp.async.bulk.tensor.2d): on the GPU its
//     `driver` bytes are the CUtensorMap that cuTensorMapEncodeTiled wrote; the emulator reads
//     the plain fields, which the same host call fills (make_tensor_map_2d); TensorMap3d, the
//     same for cp.async.bulk.tensor.3d;
//   - the shared-memory matrix descriptor of wgmma.mma_async (wgmma_desc);
//   - the swizzle modes both use: the 16-byte chunk index of a shared-memory address (bits 4..6)
//     is XORed with its 128-byte row index within a 1024-byte atom (bits 7..9), over 1, 2 or 3
//     bits for the 32-, 64- and 128-byte modes.
#pragma once

#include <cstdint>

#include "gemmax/backend/cuda/kernels/kernel_base.h"

namespace gemmax::kern {

// The values are cuTensorMapEncodeTiled's CUtensorMapSwizzle.
enum class Swizzle : int32_t { kNone = 0, k32B = 1, k64B = 2, k128B = 3 };

GEMMAX_HD int swizzle_bytes(Swizzle s) { return s == Swizzle::kNone ? 16 : 16 << int(s); }

// The physical shared-memory address of a logical one under a swizzle mode.
GEMMAX_HD uint32_t swizzle_address(uint32_t addr, Swizzle s) {
  if (s == Swizzle::kNone) return addr;
  const uint32_t bits = (1u << int(s)) - 1;  // 1, 2 or 3 bits
  return addr ^ (((addr >> 7) & bits) << 4);
}

// A two-dimensional tensor in global memory as a TMA copy reads it: dims[0] elements per row
// (contiguous), dims[1] rows `row_bytes` apart; a copy moves one box of box[1] rows of box[0]
// elements into shared memory, rows box[0] * elem_bytes apart, swizzled; elements outside the
// tensor read as zeros.
struct alignas(64) TensorMap2d {
  unsigned char driver[128];  // CUtensorMap (GPU builds), 64-byte aligned as the driver wants
  const void* base;
  int64_t dims[2];
  int64_t row_bytes;
  int32_t box[2];
  int32_t elem_bytes;
  Swizzle swizzle;
};

// The plain fields of a tensor map; the GPU platform then encodes `driver` from them. Returns
// null, or what is wrong with them (the limits cuTensorMapEncodeTiled checks).
inline const char* make_tensor_map_2d(TensorMap2d* m, const void* base, int elem_bytes,
                                      int64_t cols, int64_t rows, int64_t row_bytes, int box_cols,
                                      int box_rows, Swizzle swizzle) {
  *m = TensorMap2d{};
  m->base = base;
  m->dims[0] = cols;
  m->dims[1] = rows;
  m->row_bytes = row_bytes;
  m->box[0] = box_cols;
  m->box[1] = box_rows;
  m->elem_bytes = elem_bytes;
  m->swizzle = swizzle;
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0)
    return "the global address is not 16-byte aligned";
  if (row_bytes % 16 != 0) return "the row stride is not a multiple of 16 bytes";
  if (cols < 1 || rows < 1 || cols > (int64_t(1) << 32) || rows > (int64_t(1) << 32))
    return "a dimension is outside [1, 2^32]";
  if (box_cols < 1 || box_rows < 1 || box_cols > 256 || box_rows > 256)
    return "a box dimension is outside [1, 256]";
  if ((box_cols * elem_bytes) % 16 != 0) return "the box row is not a multiple of 16 bytes";
  if (swizzle != Swizzle::kNone && box_cols * elem_bytes > swizzle_bytes(swizzle))
    return "the box row is wider than the swizzle span";
  return nullptr;
}

// A three-dimensional tensor as a TMA copy reads it: dims[0] elements per row (contiguous),
// dims[1] rows strides[0] bytes apart, dims[2] planes strides[1] bytes apart. A box of box[2]
// planes of box[1] rows of box[0] elements lands in shared memory as box[1] * box[2] rows,
// box[0] * elem_bytes apart, swizzled; elements outside the tensor read as zeros. Attention reads
// K and V ([B, S, KV, hd]) as {KV * hd, S, B}: one kv head's keys of one sequence are a box, and
// keys past the sequence's end read as zeros, not as the next sequence's.
struct alignas(64) TensorMap3d {
  unsigned char driver[128];  // CUtensorMap (GPU builds)
  const void* base;
  int64_t dims[3];
  int64_t strides[2];  // bytes between rows (dims[1]) and between planes (dims[2])
  int32_t box[3];
  int32_t elem_bytes;
  Swizzle swizzle;
};

inline const char* make_tensor_map_3d(TensorMap3d* m, const void* base, int elem_bytes,
                                      const int64_t (&dims)[3], const int64_t (&strides)[2],
                                      const int32_t (&box)[3], Swizzle swizzle) {
  *m = TensorMap3d{};
  m->base = base;
  for (int i = 0; i < 3; ++i) m->dims[i] = dims[i], m->box[i] = box[i];
  m->strides[0] = strides[0];
  m->strides[1] = strides[1];
  m->elem_bytes = elem_bytes;
  m->swizzle = swizzle;
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0)
    return "the global address is not 16-byte aligned";
  for (const int64_t s : strides)
    if (s % 16 != 0 || s < 16 || s >= (int64_t(1) << 40))
      return "a stride is not a multiple of 16 bytes below 2^40";
  for (int i = 0; i < 3; ++i) {
    if (dims[i] < 1 || dims[i] > (int64_t(1) << 32)) return "a dimension is outside [1, 2^32]";
    if (box[i] < 1 || box[i] > 256) return "a box dimension is outside [1, 256]";
  }
  if ((box[0] * elem_bytes) % 16 != 0) return "the box row is not a multiple of 16 bytes";
  if (swizzle != Swizzle::kNone && box[0] * elem_bytes > swizzle_bytes(swizzle))
    return "the box row is wider than the swizzle span";
  return nullptr;
}

// Tiles in the 128-byte swizzle start on its 1024-byte atom (the pattern repeats every 8 rows of
// 128 bytes): the dynamic shared memory of every sm90 kernel, from its first aligned byte.
constexpr uint32_t kSm90SwizzleAtom = 1024;
template <class X>
GEMMAX_KFN char* sm90_aligned_smem(X& x) {
  char* raw = x.template smem<char>();
  const uint32_t at = x.shared_addr(raw) % kSm90SwizzleAtom;
  return raw + (at ? kSm90SwizzleAtom - at : 0);
}

// The 64-bit shared-memory matrix descriptor of wgmma (PTX ISA, "Matrix Descriptor Format"):
// bits 0-13 start address >> 4, 16-29 leading-dimension byte offset >> 4, 32-45 stride-dimension
// byte offset >> 4, 49-51 base offset (0: the swizzle pattern starts on its alignment), 62-63
// swizzle mode (0 none, 1 128-byte, 2 64-byte, 3 32-byte).
GEMMAX_HD uint64_t wgmma_desc(uint32_t smem_addr, uint32_t leading_bytes, uint32_t stride_bytes,
                              Swizzle s) {
  const uint64_t mode = s == Swizzle::k128B  ? 1
                        : s == Swizzle::k64B ? 2
                        : s == Swizzle::k32B ? 3
                                             : 0;
  return uint64_t((smem_addr & 0x3ffff) >> 4) | (uint64_t((leading_bytes & 0x3ffff) >> 4) << 16) |
         (uint64_t((stride_bytes & 0x3ffff) >> 4) << 32) | (mode << 62);
}

// The fields of a descriptor, as the emulator reads them.
struct WgmmaDescFields {
  uint32_t start, leading_bytes, stride_bytes, base_offset;
  Swizzle swizzle;
};
GEMMAX_HD WgmmaDescFields wgmma_desc_fields(uint64_t d) {
  const uint32_t mode = uint32_t(d >> 62);
  const Swizzle s = mode == 1   ? Swizzle::k128B
                    : mode == 2 ? Swizzle::k64B
                    : mode == 3 ? Swizzle::k32B
                                : Swizzle::kNone;
  return {uint32_t(d & 0x3fff) << 4, uint32_t((d >> 16) & 0x3fff) << 4,
          uint32_t((d >> 32) & 0x3fff) << 4, uint32_t((d >> 49) & 7), s};
}

// Row and column, within the 64 x N accumulator of a warpgroup, of element i of a thread's
// N / 2 registers (PTX ISA, wgmma .m64nNk16 D fragment): warp w of the warpgroup holds rows
// 16 w .. 16 w + 15, and each 8-column slice j is laid out as mma.m16n8's C fragment in
// registers 4 j .. 4 j + 3.
GEMMAX_HD int wgmma_acc_row(int thread_in_group, int i) {
  const int lane = thread_in_group % 32;
  return 16 * (thread_in_group / 32) + (lane >> 2) + 8 * ((i & 3) >> 1);
}
GEMMAX_HD int wgmma_acc_col(int thread_in_group, int i) {
  return 8 * (i >> 2) + 2 * (thread_in_group % 4) + (i & 1);
}

}  // namespace gemmax::kern
