// The tensor-core grouped matmuls of bfloat16 runs (kernels/gmm_mma.h), and the choice of
// kernels for a call (gmm_path): the tensor cores take it unless fast kernels are off, a row
// length is not a multiple of 8 or an operand is not 16-byte aligned; then the plain kernels
// run, and the run says so once per op and shape class (SlowPathNotes).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "gemmax/backend/cuda/kernels/gmm_mma.h"
#include "gemmax/backend/cuda/ops/common.h"
#include "gemmax/base/strings.h"

namespace gemmax::cuda::ops {

// Whether the tensor-core kernels are built for inputs E and output TC: bfloat16 inputs, a
// bfloat16 or float32 output.
template <class E, class TC = E>
constexpr bool kGmmTensorCoreTypes = std::is_same_v<E, bf16> && !std::is_same_v<TC, double>;

// The kernels that run one call: the plain ones, mma.sync (this file) or the sm90 ones
// (cuda_gmm=sm90, gmm_sm90_ops.h).
enum class GmmPath { kPlain, kMma, kSm90 };

// The path of a call of tensor-core types over `operands`, every tensor its kernels read or
// write; a refusal is announced.
template <class P>
GmmPath choose_gmm_path(P& p, const char* op, const kern::GmmArgs& a,
                        std::initializer_list<std::pair<const char*, const Tensor*>> operands) {
  if (!p.fast_kernels()) {
    p.slow_paths().note(op, "", "cuda_kernels=simple (cuda_kernels=fast runs the tensor cores)");
    return GmmPath::kPlain;
  }
  const std::string shape = str_cat("[k=", a.k, ", n=", a.n, "]");
  if (a.k % 8 != 0 || a.n % 8 != 0) {
    p.slow_paths().note(op, shape, "the tensor-core kernels need k and n multiples of 8");
    return GmmPath::kPlain;
  }
  for (const auto& [name, t] : operands)
    if (reinterpret_cast<uintptr_t>(t->raw()) % 16 != 0) {
      p.slow_paths().note(op, shape,
                          str_cat(name, " is not 16-byte aligned (a view at an odd offset?)"));
      return GmmPath::kPlain;
    }
  return p.sm90_gmm() ? GmmPath::kSm90 : GmmPath::kMma;
}

template <class P>
GmmPath gmm_path(P& p, const GmmArgs& args, const kern::GmmArgs& a) {
  return choose_gmm_path(p, "gmm", a, {{"out", &args.out}, {"lhs", &args.lhs}, {"rhs", &args.rhs}});
}
template <class P>
GmmPath gmm_path(P& p, const GmmDlhsArgs& args, const kern::GmmArgs& a) {
  return choose_gmm_path(p, "gmm_dlhs", a,
                         {{"dlhs", &args.dlhs}, {"dout", &args.dout}, {"rhs", &args.rhs}});
}
template <class P>
GmmPath gmm_path(P& p, const GmmDrhsArgs& args, const kern::GmmArgs& a) {
  return choose_gmm_path(p, "gmm_drhs", a,
                         {{"drhs", &args.drhs}, {"lhs", &args.lhs}, {"dout", &args.dout}});
}

inline Launch gmm_mma_launch(int64_t gx, int64_t gy, int64_t gz) {
  GEMMAX_CHECK(gy <= 65535 && gz <= 65535, "cuda backend: a grouped matmul of ", gy, " x ", gz,
               " tiles is over CUDA's grid limit (65535): split the batch (a smaller "
               "per_device_batch_size or max_target_length)");
  Launch l;
  l.gx = uint32_t(gx);
  l.gy = uint32_t(gy);
  l.gz = uint32_t(gz);
  l.threads = kern::GmmMma::kThreads;
  l.smem = kern::GmmMma::smem_bytes();
  return l;
}

// The group table of the tensor-core kernels, scanned once on the device into the op's scratch
// (instead of by one thread of every block), in tiles of `tile_rows`.
template <class P>
kern::GmmArgs with_group_table(P& p, kern::GmmArgs a, int64_t tile_rows = kern::GmmMma::BM) {
  Scratch s = p.scratch();
  int32_t* table = s.take<int32_t>(2 * (a.G + 1), "the grouped matmul's group table");
  using K = kern::GroupTableKernel;
  Launch l;
  l.threads = K::kMaxThreads;
  l.smem = K::smem_bytes(l.threads);
  p.template launch<K>(l, table, a.group_sizes, a.G, a.m, tile_rows, a.err, a.op);
  a.table = table;
  return a;
}

// The launches of GmmPath::kMma.
template <class P>
void gmm_fast(P& p, const Tensor& out, const Tensor& lhs, const Tensor& rhs,
              const kern::GmmArgs& a) {
  using M = kern::GmmMma;
  const Launch l =
      gmm_mma_launch(kern::ceil_div(a.n, M::BN), kern::gmm_max_row_tiles(a.m, a.G, M::BM), 1);
  p.template launch<kern::GmmForwardMmaKernel>(l, ptr<bf16>(out), (const bf16*)ptr<bf16>(lhs),
                                               (const bf16*)ptr<bf16>(rhs), with_group_table(p, a));
}

template <class P>
void gmm_dlhs_fast(P& p, const Tensor& dlhs, const Tensor& dout, const Tensor& rhs,
                   const kern::GmmArgs& a) {
  using M = kern::GmmMma;
  const Launch l =
      gmm_mma_launch(kern::ceil_div(a.k, M::BN), kern::gmm_max_row_tiles(a.m, a.G, M::BM), 1);
  p.template launch<kern::GmmDlhsMmaKernel>(l, ptr<bf16>(dlhs), (const bf16*)ptr<bf16>(dout),
                                            (const bf16*)ptr<bf16>(rhs), with_group_table(p, a));
}

// drhs of TC: bfloat16 or float32.
template <class TC, class P>
void gmm_drhs_fast(P& p, const Tensor& drhs, const Tensor& lhs, const Tensor& dout,
                   const kern::GmmArgs& a) {
  using M = kern::GmmMma;
  const Launch l = gmm_mma_launch(kern::ceil_div(a.k, M::BN), kern::ceil_div(a.n, M::BM), a.G);
  p.template launch<kern::GmmDrhsMmaKernel>(l, ptr<TC>(drhs), (const bf16*)ptr<bf16>(lhs),
                                            (const bf16*)ptr<bf16>(dout), with_group_table(p, a));
}

}  // namespace gemmax::cuda::ops
