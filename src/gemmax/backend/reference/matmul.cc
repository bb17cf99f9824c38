// Dense and grouped matmuls. Products are summed in fp64 whatever the element type; the output
// may be wider than the inputs (bf16 inputs, fp32 weight gradients) and is rounded once.
#include <type_traits>
#include <vector>

#include "gemmax/backend/reference/dispatch.h"
#include "gemmax/backend/reference/reference_backend.h"

namespace gemmax {
namespace {

// c[M, N] (+)= op(a) . op(b) with a [M, K] or [K, M] (trans_a), b [K, N] or [N, K] (trans_b).
template <class TC, class T>
void matmul_loops(TC* c, const T* a, bool trans_a, const T* b, bool trans_b, int64_t M, int64_t N,
                  int64_t K, bool accumulate) {
  if (!trans_a && trans_b) {  // "NT": every output is a dot product of two contiguous rows
    if constexpr (std::is_same_v<T, bf16>) {
      // bf16: widen each row of a once (exactly) rather than once per output.
#pragma omp parallel
      {
        std::vector<float> row(K);
#pragma omp for
        for (int64_t i = 0; i < M; ++i) {
          for (int64_t k = 0; k < K; ++k) row[k] = float(a[i * K + k]);
          const float* ai = row.data();
          for (int64_t j = 0; j < N; ++j) {
            const T* bj = b + j * K;
            double s = 0;
#pragma omp simd reduction(+ : s)
            for (int64_t k = 0; k < K; ++k) s += double(ai[k]) * double(bj[k]);
            c[i * N + j] = TC(accumulate ? double(c[i * N + j]) + s : s);
          }
        }
      }
      return;
    }
#pragma omp parallel for
    for (int64_t i = 0; i < M; ++i) {
      const T* ai = a + i * K;
      for (int64_t j = 0; j < N; ++j) {
        const T* bj = b + j * K;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t k = 0; k < K; ++k) s += double(ai[k]) * double(bj[k]);
        c[i * N + j] = TC(accumulate ? double(c[i * N + j]) + s : s);
      }
    }
    return;
  }
  // "NN", "TN", "TT": build each output row in an fp64 buffer from scaled rows of b.
#pragma omp parallel
  {
    std::vector<double> row(N);
#pragma omp for
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) row[j] = accumulate ? double(c[i * N + j]) : 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double aik = double(trans_a ? a[k * M + i] : a[i * K + k]);
        if (aik == 0.0) continue;
        if (!trans_b) {
          const T* bk = b + k * N;
#pragma omp simd
          for (int64_t j = 0; j < N; ++j) row[j] += aik * double(bk[j]);
        } else {
          for (int64_t j = 0; j < N; ++j) row[j] += aik * double(b[j * K + k]);
        }
      }
      for (int64_t j = 0; j < N; ++j) c[i * N + j] = TC(row[j]);
    }
  }
}

struct Dims {
  int64_t M, N, K;
};

Dims matmul_dims(const Tensor& c, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b) {
  GEMMAX_CHECK(a.ndim() == 2 && b.ndim() == 2 && c.ndim() == 2, "matmul needs 2-D tensors, got ",
               a.str(), " ", b.str(), " ", c.str());
  const int64_t M = trans_a ? a.dim(1) : a.dim(0), K = trans_a ? a.dim(0) : a.dim(1);
  const int64_t Kb = trans_b ? b.dim(1) : b.dim(0), N = trans_b ? b.dim(0) : b.dim(1);
  GEMMAX_CHECK(K == Kb && c.dim(0) == M && c.dim(1) == N, "matmul shapes: op(", a.str(),
               trans_a ? ")^T" : ")", " . op(", b.str(), trans_b ? ")^T" : ")", " -> ", c.str());
  GEMMAX_CHECK(a.dtype() == b.dtype(), "matmul input dtypes differ: ", a.str(), " ", b.str());
  return {M, N, K};
}

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

}  // namespace

void ReferenceBackend::matmul(const Tensor& c, const Tensor& a, bool trans_a, const Tensor& b,
                              bool trans_b, bool accumulate) {
  const Dims d = matmul_dims(c, a, trans_a, b, trans_b);
  ref::dispatch_float2(c, a, [&]<class TC, class T>() {
    matmul_loops(c.data<TC>(), a.data<T>(), trans_a, b.data<T>(), trans_b, d.M, d.N, d.K,
                 accumulate);
  });
}

// out[r] = lhs[r] . rhs[g]^T : per group an "NT" product on its rows.
void ReferenceBackend::gmm(const Tensor& out, const Tensor& lhs, const Tensor& rhs,
                           const Tensor& group_sizes) {
  const int64_t m = lhs.dim(0), k = lhs.dim(1), G = rhs.dim(0), n = rhs.dim(1);
  GEMMAX_CHECK(rhs.dim(2) == k && out.dim(0) == m && out.dim(1) == n && group_sizes.numel() == G,
               "gmm shapes: lhs ", lhs.str(), " rhs ", rhs.str(), " out ", out.str());
  ref::check_dtypes(out, lhs, rhs, "gmm");
  ref::dispatch_float(out, [&]<class T>() {
    for_each_group(group_sizes, m, [&](int64_t g, int64_t first, int64_t rows) {
      matmul_loops(out.data<T>() + first * n, lhs.data<T>() + first * k, false,
                   rhs.data<T>() + g * n * k, true, rows, n, k, false);
    });
  });
}

// dlhs[r] = dout[r] . rhs[g] : "NN" on rhs as stored ([n, k] per group), no transposed copy.
void ReferenceBackend::gmm_dlhs(const Tensor& dlhs, const Tensor& dout, const Tensor& rhs,
                                const Tensor& group_sizes) {
  const int64_t m = dout.dim(0), n = dout.dim(1), G = rhs.dim(0), k = rhs.dim(2);
  GEMMAX_CHECK(rhs.dim(1) == n && dlhs.dim(0) == m && dlhs.dim(1) == k && group_sizes.numel() == G,
               "gmm_dlhs shapes: dout ", dout.str(), " rhs ", rhs.str(), " dlhs ", dlhs.str());
  ref::check_dtypes(dlhs, dout, rhs, "gmm_dlhs");
  ref::dispatch_float(dlhs, [&]<class T>() {
    for_each_group(group_sizes, m, [&](int64_t g, int64_t first, int64_t rows) {
      matmul_loops(dlhs.data<T>() + first * k, dout.data<T>() + first * n, false,
                   rhs.data<T>() + g * n * k, false, rows, k, n, false);
    });
  });
}

// drhs[g] += dout_g^T . lhs_g : "TN" over the group's rows; empty groups are left untouched.
// drhs may be wider than lhs and dout (fp32 expert-weight gradients of bf16 activations).
void ReferenceBackend::gmm_drhs(const Tensor& drhs, const Tensor& lhs, const Tensor& dout,
                                const Tensor& group_sizes) {
  const int64_t m = lhs.dim(0), k = lhs.dim(1), n = dout.dim(1), G = drhs.dim(0);
  GEMMAX_CHECK(drhs.dim(1) == n && drhs.dim(2) == k && dout.dim(0) == m && group_sizes.numel() == G,
               "gmm_drhs shapes: lhs ", lhs.str(), " dout ", dout.str(), " drhs ", drhs.str());
  GEMMAX_CHECK(lhs.dtype() == dout.dtype(), "gmm_drhs: ", lhs.str(), " and ", dout.str());
  ref::dispatch_float2(drhs, lhs, [&]<class TC, class T>() {
    for_each_group(group_sizes, m, [&](int64_t g, int64_t first, int64_t rows) {
      matmul_loops(drhs.data<TC>() + g * n * k, dout.data<T>() + first * n, true,
                   lhs.data<T>() + first * k, false, n, k, rows, true);
    });
  });
}

}  // namespace gemmax
