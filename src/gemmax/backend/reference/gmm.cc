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

// The sorted rows of a grouped matmul and where they live (GmmRows): row r of the input side is row
// in(r) of its tensor, of the output side row out(r); each group's weight is rows [w0, w0 + n) of
// its [N, k] block.
struct GroupedRows {
  const int32_t* in_map = nullptr;
  const int32_t* out_map = nullptr;
  int64_t m = 0, w0 = 0, n = 0, N = 0;  // rows; weight window; full weight rows per group
  int64_t in(int64_t r) const { return in_map ? in_map[r] : r; }
  int64_t out(int64_t r) const { return out_map ? out_map[r] : r; }
};

GroupedRows grouped_rows(const GmmRows& rows, int64_t m, int64_t N) {
  GroupedRows g;
  g.m = m;
  g.N = N;
  g.w0 = rows.weight_begin;
  g.n = rows.weight_rows < 0 ? N - rows.weight_begin : rows.weight_rows;
  if (rows.in.defined()) g.in_map = rows.in.data<int32_t>();
  if (rows.out.defined()) g.out_map = rows.out.data<int32_t>();
  return g;
}

void check_map_range(const int32_t* map, int64_t m, int64_t limit, const char* what) {
  if (!map) return;
  for (int64_t r = 0; r < m; ++r)
    GEMMAX_CHECK(map[r] >= 0 && map[r] < limit, what, " row map entry ", map[r], " at ", r,
                 " is outside [0, ", limit, ")");
}

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
void ReferenceBackend::do_gmm(const GmmArgs& args, NoDims) {
  const auto& [out, lhs, rhs, group_sizes, rows] = args;
  const int64_t k = lhs.dim(1), N = rhs.dim(1), m = out.dim(0);
  const GroupedRows R = grouped_rows(rows, m, N);
  check_map_range(R.in_map, m, lhs.dim(0), "gmm lhs");
  check_map_range(R.out_map, m, m, "gmm out");
  const std::vector<int32_t> grp = row_groups(group_sizes, m);
  dispatch<float, bf16, double>(out, "gmm", [&]<class T>() {
    const T *pl = lhs.data<T>(), *pw = rhs.data<T>();
    T* po = out.data<T>();
#pragma omp parallel for
    for (int64_t r = 0; r < m; ++r) {
      const T* a = pl + R.in(r)*k;
      T* o = po + R.out(r) * R.n;
      for (int64_t j = 0; j < R.n; ++j) {
        const T* w = pw + (grp[r] * N + R.w0 + j) * k;
        double s = rows.accumulate ? double(o[j]) : 0.0;
        for (int64_t c = 0; c < k; ++c) s += double(a[c]) * double(w[c]);
        o[j] = T(s);
      }
    }
  });
}

// dlhs[r] (+)= dout[r] . rhs[g]: "NN" on rhs as stored ([n, k] per group), no transposed copy.
void ReferenceBackend::do_gmm_dlhs(const GmmDlhsArgs& args, NoDims) {
  const auto& [dlhs, dout, rhs, group_sizes, rows] = args;
  const int64_t k = rhs.dim(2), N = rhs.dim(1), m = dlhs.dim(0);
  const GroupedRows R = grouped_rows(rows, m, N);
  check_map_range(R.in_map, m, m, "gmm_dlhs dlhs");
  check_map_range(R.out_map, m, dout.dim(0), "gmm_dlhs dout");
  const std::vector<int32_t> grp = row_groups(group_sizes, m);
  dispatch<float, bf16, double>(dlhs, "gmm_dlhs", [&]<class T>() {
    const T *pd = dout.data<T>(), *pw = rhs.data<T>();
    T* pl = dlhs.data<T>();
#pragma omp parallel
    {
      std::vector<double> acc(k);
#pragma omp for
      for (int64_t r = 0; r < m; ++r) {
        const T* d = pd + R.out(r) * R.n;
        T* o = pl + R.in(r)*k;
        for (int64_t c = 0; c < k; ++c) acc[c] = rows.accumulate ? double(o[c]) : 0.0;
        for (int64_t j = 0; j < R.n; ++j) {
          const double dj = double(d[j]);
          const T* w = pw + (grp[r] * N + R.w0 + j) * k;
          for (int64_t c = 0; c < k; ++c) acc[c] += dj * double(w[c]);
        }
        for (int64_t c = 0; c < k; ++c) o[c] = T(acc[c]);
      }
    }
  });
}

// drhs[g] += dout_g^T . lhs_g : "TN" over the group's rows; empty groups are left untouched.
// drhs may be wider than lhs and dout (fp32 expert-weight gradients of bf16 activations).
void ReferenceBackend::do_gmm_drhs(const GmmDrhsArgs& args, NoDims) {
  const auto& [drhs, lhs, dout, group_sizes, rows] = args;
  const int64_t k = lhs.dim(1), N = drhs.dim(1);
  const int64_t m = rows.in.defined() ? rows.in.numel() : lhs.dim(0);
  const GroupedRows R = grouped_rows(rows, m, N);
  check_map_range(R.in_map, m, lhs.dim(0), "gmm_drhs lhs");
  check_map_range(R.out_map, m, dout.dim(0), "gmm_drhs dout");
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
        for (int64_t j = 0; j < R.n; ++j) {
          const auto [g, first, n] = groups[gi];
          TC* w = pw + (g * N + R.w0 + j) * k;
          for (int64_t c = 0; c < k; ++c) acc[c] = double(w[c]);
          for (int64_t r = first; r < first + n; ++r) {
            const double dj = double(pd[R.out(r) * R.n + j]);
            const T* a = pl + R.in(r)*k;
            for (int64_t c = 0; c < k; ++c) acc[c] += dj * double(a[c]);
          }
          for (int64_t c = 0; c < k; ++c) w[c] = TC(acc[c]);
        }
    }
  });
}

}  // namespace gemmax
