// Grouped matmuls on the product engine (gemm.h). A grouped matmul runs one product per
// expert over that expert's contiguous sorted rows; GmmRows' maps become the row
// maps of the engine's operands, so the permute and un-permute around the experts cost
// nothing. An expert with no rows is skipped: its weight gradient stays as it is.
#include <omp.h>

#include <tuple>
#include <type_traits>

#include "gemmax/backend/cpu/common.h"
#include "gemmax/backend/cpu/cpu_backend.h"

namespace gemmax {
using namespace cpu;

namespace {

// The groups of the sorted rows: g owns rows [first, first + rows).
struct Group {
  int64_t g, first, rows;
};

std::vector<Group> groups_of(const Tensor& group_sizes, int64_t m) {
  const int32_t* sizes = group_sizes.data<int32_t>();
  std::vector<Group> out;
  int64_t first = 0;
  for (int64_t g = 0; g < group_sizes.numel(); ++g) {
    GEMMAX_CHECK(sizes[g] >= 0, "group ", g, " has ", sizes[g], " rows");
    if (sizes[g] > 0) out.push_back({g, first, sizes[g]});
    first += sizes[g];
  }
  GEMMAX_CHECK(first == m, "group sizes sum to ", first, " but there are ", m, " rows");
  return out;
}

// The rows [first, ...) of a tensor seen through an optional row map.
template <class T>
Rows<T> rows_of(T* base, int64_t ld, const Tensor& map, int64_t first) {
  if (map.defined()) return Rows<T>{base, ld, map.data<int32_t>() + first};
  return Rows<T>{base + first * ld, ld, nullptr};
}

// Runs one product per group: with enough groups, whole groups per thread (each on its own
// scratch, no barrier inside a grouped matmul; any schedule gives the same result, as every
// output row is computed by one thread in one order); with few, the groups one after another,
// each on every thread.
template <class Serial, class Parallel>
void for_each_group(const std::vector<Group>& groups, const GemmScratch& scratch, Serial&& serial,
                    Parallel&& parallel) {
  const int64_t n = int64_t(groups.size());
  if (n >= 2 * omp_get_max_threads()) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i)
      serial(groups[size_t(i)], scratch.thread[size_t(omp_get_thread_num())]);
  } else {
    for (const Group& g : groups) parallel(g);
  }
}

}  // namespace

void CpuBackend::do_gmm(const GmmArgs& args, GmmDims d) {
  const auto& [out, lhs, rhs, group_sizes, rows] = args;
  if (!fast_dtypes({&out, &lhs, &rhs})) return reference_.do_gmm(args, d);
  const int64_t k = d.k, N = d.N, m = d.m, w0 = d.w0, n = d.n;
  check_row_maps_on_host(rows, d, "gmm lhs", "gmm out");
  dispatch<float, bf16>(out, "gmm", [&]<class T>() {
    const T *pl = lhs.data<T>(), *pr = rhs.data<T>();
    T* po = out.data<T>();
    auto args = [&](const Group& g) {
      return std::tuple(rows_of<const T>(pl, k, rows.in, g.first),
                        BMatrix<T>{pr + (g.g * N + w0) * k, k, true},
                        rows_of<T>(po, n, rows.out, g.first));
    };
    for_each_group(
        groups_of(group_sizes, m), gemm_,
        [&](const Group& g, void* scratch) {
          const auto [a, b, c] = args(g);
          gemm_serial<T, T>(isa_, g.rows, n, k, a, b, c, rows.accumulate, scratch,
                            gemm_.thread_bytes);
        },
        [&](const Group& g) {
          const auto [a, b, c] = args(g);
          gemm<T, T>(isa_, g.rows, n, k, a, b, c, rows.accumulate, gemm_);
        });
  });
}

void CpuBackend::do_gmm_dlhs(const GmmDlhsArgs& args, GmmDims d) {
  const auto& [dlhs, dout, rhs, group_sizes, rows] = args;
  if (!fast_dtypes({&dlhs, &dout, &rhs})) return reference_.do_gmm_dlhs(args, d);
  const int64_t k = d.k, N = d.N, m = d.m, w0 = d.w0, n = d.n;
  check_row_maps_on_host(rows, d, "gmm_dlhs dlhs", "gmm_dlhs dout");
  dispatch<float, bf16>(dlhs, "gmm_dlhs", [&]<class T>() {
    // dlhs = dout . W_g, W_g [n, k] read in place (its rows are the reduction).
    const T *pd = dout.data<T>(), *pr = rhs.data<T>();
    T* pl = dlhs.data<T>();
    auto args = [&](const Group& g) {
      return std::tuple(rows_of<const T>(pd, n, rows.out, g.first),
                        BMatrix<T>{pr + (g.g * N + w0) * k, k, false},
                        rows_of<T>(pl, k, rows.in, g.first));
    };
    for_each_group(
        groups_of(group_sizes, m), gemm_,
        [&](const Group& g, void* scratch) {
          const auto [a, b, c] = args(g);
          gemm_serial<T, T>(isa_, g.rows, k, n, a, b, c, rows.accumulate, scratch,
                            gemm_.thread_bytes);
        },
        [&](const Group& g) {
          const auto [a, b, c] = args(g);
          gemm<T, T>(isa_, g.rows, k, n, a, b, c, rows.accumulate, gemm_);
        });
  });
}

void CpuBackend::do_gmm_drhs(const GmmDrhsArgs& args, GmmDims d) {
  const auto& [drhs, lhs, dout, group_sizes, rows] = args;
  if (!fast_dtypes({&drhs, &lhs, &dout})) return reference_.do_gmm_drhs(args, d);
  const int64_t k = d.k, N = d.N, m = d.m, w0 = d.w0, n = d.n;
  GEMMAX_CHECK(drhs.dtype() == DType::F32,
               "cpu backend: gmm_drhs: the fast path writes float32 "
               "weight gradients, got drhs ",
               drhs.str());
  check_row_maps_on_host(rows, d, "gmm_drhs lhs", "gmm_drhs dout");
  dispatch<float, bf16>(lhs, "gmm_drhs", [&]<class T>() {
    // drhs[g][w0 + j][c] += sum over the group's rows of dout[r][j] lhs[r][c]
    const T *pd = dout.data<T>(), *pl = lhs.data<T>();
    float* pw = drhs.data<float>();
    for_each_group(
        groups_of(group_sizes, m), gemm_,
        [&](const Group& g, void* scratch) {
          gemm_tn_serial<T, float>(isa_, n, k, g.rows, rows_of<const T>(pd, n, rows.out, g.first),
                                   rows_of<const T>(pl, k, rows.in, g.first),
                                   pw + (g.g * N + w0) * k, k, true, scratch, gemm_.thread_bytes);
        },
        [&](const Group& g) {
          gemm_tn<T, float>(isa_, n, k, g.rows, rows_of<const T>(pd, n, rows.out, g.first),
                            rows_of<const T>(pl, k, rows.in, g.first), pw + (g.g * N + w0) * k, k,
                            true, gemm_);
        });
  });
}

}  // namespace gemmax
