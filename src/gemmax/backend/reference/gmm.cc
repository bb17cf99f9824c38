// Grouped matmuls (the experts' products). Products are summed in fp64 whatever the element
// type; the output may be wider than the inputs (bf16 inputs, fp32 weight gradients) and is
// rounded once.
#include <algorithm>
#include <array>
#include <type_traits>
#include <vector>

#include "gemmax/backend/reference/common.h"
#include "gemmax/backend/reference/reference_backend.h"

namespace gemmax {
namespace {

// Calls f(g, first, rows) for every group g that owns rows: group g owns the contiguous rows
// [first, first + rows). Groups with no rows are skipped (their weight gradient stays as is).
template <class F>
void for_each_group(const Tensor& group_sizes, int64_t total_rows, F&& f) {
  const int32_t* sizes = group_sizes.data<int32_t>();
  int64_t first = 0;
  for (int64_t g = 0; g < group_sizes.numel(); ++g) first += sizes[g];
  GEMMAX_CHECK(first == total_rows, "group sizes sum to ", first, " but there are ", total_rows,
               " rows");
  first = 0;
  for (int64_t g = 0; g < group_sizes.numel(); ++g) {
    if (sizes[g] > 0) f(g, first, int64_t(sizes[g]));
    first += sizes[g];
  }
}

// Where the sorted rows of a grouped matmul live (GmmRows): row r of the input side is row in(r)
// of its tensor, of the output side row out(r).
struct RowMaps {
  const int32_t* in_map = nullptr;
  const int32_t* out_map = nullptr;
  explicit RowMaps(const GmmRows& rows) {
    if (rows.in.defined()) in_map = rows.in.data<int32_t>();
    if (rows.out.defined()) out_map = rows.out.data<int32_t>();
  }
  int64_t in(int64_t r) const { return in_map ? in_map[r] : r; }
  int64_t out(int64_t r) const { return out_map ? out_map[r] : r; }
};

// The group of each sorted row.
std::vector<int32_t> row_groups(const Tensor& group_sizes, int64_t m) {
  std::vector<int32_t> g(m);
  for_each_group(group_sizes, m, [&](int64_t grp, int64_t first, int64_t rows) {
    std::fill_n(g.begin() + first, rows, int32_t(grp));
  });
  return g;
}

}  // namespace

// out[r] (+)= lhs[r] . rhs[g]^T: per row an "NT" product with its group's weight rows.
void ReferenceBackend::do_gmm(const GmmArgs& args, GmmDims d) {
  const auto& [out, lhs, rhs, group_sizes, rows] = args;
  const int64_t k = d.k, N = d.N, m = d.m;
  check_row_maps_on_host(rows, d, "gmm lhs", "gmm out");
  const RowMaps R(rows);
  const std::vector<int32_t> grp = row_groups(group_sizes, m);
  dispatch<float, bf16, double>(out, "gmm", [&]<class T>() {
    const T *pl = lhs.data<T>(), *pw = rhs.data<T>();
    T* po = out.data<T>();
#pragma omp parallel for
    for (int64_t r = 0; r < m; ++r) {
      const T* a = pl + R.in(r)*k;
      T* o = po + R.out(r) * d.n;
      for (int64_t j = 0; j < d.n; ++j) {
        const T* w = pw + (grp[r] * N + d.w0 + j) * k;
        double s = rows.accumulate ? double(o[j]) : 0.0;
        for (int64_t c = 0; c < k; ++c) s += double(a[c]) * double(w[c]);
        o[j] = T(s);
      }
    }
  });
}

// dlhs[r] (+)= dout[r] . rhs[g]: "NN" on rhs as stored ([n, k] per group), no transposed copy.
void ReferenceBackend::do_gmm_dlhs(const GmmDlhsArgs& args, GmmDims d) {
  const auto& [dlhs, dout, rhs, group_sizes, rows] = args;
  const int64_t k = d.k, N = d.N, m = d.m;
  check_row_maps_on_host(rows, d, "gmm_dlhs dlhs", "gmm_dlhs dout");
  const RowMaps R(rows);
  const std::vector<int32_t> grp = row_groups(group_sizes, m);
  dispatch<float, bf16, double>(dlhs, "gmm_dlhs", [&]<class T>() {
    const T *pd = dout.data<T>(), *pw = rhs.data<T>();
    T* pl = dlhs.data<T>();
#pragma omp parallel
    {
      std::vector<double> acc(k);
#pragma omp for
      for (int64_t r = 0; r < m; ++r) {
        const T* g = pd + R.out(r) * d.n;
        T* o = pl + R.in(r)*k;
        for (int64_t c = 0; c < k; ++c) acc[c] = rows.accumulate ? double(o[c]) : 0.0;
        for (int64_t j = 0; j < d.n; ++j) {
          const double dj = double(g[j]);
          const T* w = pw + (grp[r] * N + d.w0 + j) * k;
          for (int64_t c = 0; c < k; ++c) acc[c] += dj * double(w[c]);
        }
        for (int64_t c = 0; c < k; ++c) o[c] = T(acc[c]);
      }
    }
  });
}

// drhs[g] += dout_g^T . lhs_g : "TN" over the group's rows; empty groups are left untouched.
// drhs may be wider than lhs and dout (fp32 expert-weight gradients of bf16 activations).
void ReferenceBackend::do_gmm_drhs(const GmmDrhsArgs& args, GmmDims d) {
  const auto& [drhs, lhs, dout, group_sizes, rows] = args;
  const int64_t k = d.k, N = d.N, m = d.m;
  check_row_maps_on_host(rows, d, "gmm_drhs lhs", "gmm_drhs dout");
  const RowMaps R(rows);
  std::vector<std::array<int64_t, 3>> groups;  // (g, first, rows)
  for_each_group(group_sizes, m, [&](int64_t g, int64_t first, int64_t n) {
    groups.push_back({g, first, n});
  });
  dispatch2<float, bf16, double>(drhs, lhs, "gmm_drhs", [&]<class TC, class T>() {
    const T *pl = lhs.data<T>(), *pd = dout.data<T>();
    TC* pw = drhs.data<TC>();
    const int64_t ng = int64_t(groups.size());
#pragma omp parallel
    {
      std::vector<double> acc(k);
#pragma omp for collapse(2)
      for (int64_t gi = 0; gi < ng; ++gi)
        for (int64_t j = 0; j < d.n; ++j) {
          const auto [g, first, n] = groups[gi];
          TC* w = pw + (g * N + d.w0 + j) * k;
          for (int64_t c = 0; c < k; ++c) acc[c] = double(w[c]);
          for (int64_t r = first; r < first + n; ++r) {
            const double dj = double(pd[R.out(r) * d.n + j]);
            const T* a = pl + R.in(r)*k;
            for (int64_t c = 0; c < k; ++c) acc[c] += dj * double(a[c]);
          }
          for (int64_t c = 0; c < k; ++c) w[c] = TC(acc[c]);
        }
    }
  });
}

}  // namespace gemmax
