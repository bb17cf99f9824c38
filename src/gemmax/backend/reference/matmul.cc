// Dense matmuls. Products are summed in fp64 whatever the element type; the output may be wider
// than the inputs (bf16 inputs, fp32 weight gradients) and is rounded once.
#include <type_traits>
#include <vector>

#include "gemmax/backend/reference/common.h"
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
  const int64_t M = trans_a ? a.dim(1) : a.dim(0), K = trans_a ? a.dim(0) : a.dim(1);
  const int64_t N = trans_b ? b.dim(0) : b.dim(1);
  return {M, N, K};
}

}  // namespace

void ReferenceBackend::do_matmul(const MatmulArgs& args, NoDims) {
  const auto& [c, a, trans_a, b, trans_b, accumulate] = args;
  const Dims d = matmul_dims(c, a, trans_a, b, trans_b);
  dispatch2<float, bf16, double>(c, a, "matmul", [&]<class TC, class T>() {
    matmul_loops(c.data<TC>(), a.data<T>(), trans_a, b.data<T>(), trans_b, d.M, d.N, d.K,
                 accumulate);
  });
}

}  // namespace gemmax
