// The reference backend's grouped matmul (reference/gmm.cc): forward against a direct sum,
// backward against central finite differences in fp64, and its row maps, weight windows and
// accumulation against the plain products they stand for.
#include <gtest/gtest.h>

#include "gemmax/backend/reference/reference_backend.h"
#include "reference_ops.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::expect_grad_matches_fd;
using testing::inner;
using testing::max_abs_diff;
using testing::ReferenceOps;

TEST_F(ReferenceOps, GroupedMatmulForwardAndBackward) {
  // Groups of 3, 0 (an expert with no rows), 4 and 1 rows; rhs in [G, n, k] layout.
  const int64_t m = 8, k = 5, n = 6, G = 4;
  Tensor sizes = ints({3, 0, 4, 1});
  Tensor lhs = rand({m, k}), rhs = rand({G, n, k}), r = rand({m, n});
  Tensor out = zeros({m, n});
  be.gmm({.out = out, .lhs = lhs, .rhs = rhs, .group_sizes = sizes});
  const int32_t group_of_row[m] = {0, 0, 0, 2, 2, 2, 2, 3};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t c = 0; c < k; ++c)
        s += get_as_double(lhs, i * k + c) * get_as_double(rhs, (group_of_row[i] * n + j) * k + c);
      EXPECT_NEAR(get_as_double(out, i * n + j), s, 1e-12);
    }
  auto loss = [&] {
    be.gmm({.out = out, .lhs = lhs, .rhs = rhs, .group_sizes = sizes});
    return inner(out, r);
  };
  Tensor dlhs = zeros({m, k}), drhs = zeros({G, n, k});
  be.gmm_dlhs({.dlhs = dlhs, .dout = r, .rhs = rhs, .group_sizes = sizes});
  be.gmm_drhs({.drhs = drhs, .lhs = lhs, .dout = r, .group_sizes = sizes});
  expect_grad_matches_fd("gmm dlhs", lhs, dlhs, loss, 40);
  expect_grad_matches_fd("gmm drhs", rhs, drhs, loss, 120);
  for (int64_t i = n * k; i < 2 * n * k; ++i) EXPECT_EQ(get_as_double(drhs, i), 0.0);
}

// Grouped matmuls with row maps equal the explicit permute / scatter around plain grouped
// matmuls, bit for bit (the same products summed in the same order).
TEST_F(ReferenceOps, GroupedMatmulRowMapsEqualExplicitPermutes) {
  const int64_t T = 5, K = 2, D = 4, n = 3, E = 4;
  Tensor idx = ints({2, 0, 1, 2, 2, 3, 0, 2, 1, 0}).view({T, K});
  Routing r{zeros({T * K}, DType::I32), zeros({T * K}, DType::I32), zeros({T * K}, DType::I32),
            zeros({E}, DType::I32)};
  be.route_sort({.routing = r, .idx = idx, .num_experts = E});
  const Tensor x = rand({T, D}), W = rand({E, n, D}), dout_tok = rand({T * K, n});
  // Forward with the permute folded into the row loads.
  Tensor xs = zeros({T * K, D}), plain = zeros({T * K, n}), mapped = zeros({T * K, n});
  be.permute({.xs = xs, .x = x, .order = r.order, .k = K});
  be.gmm({.out = plain, .lhs = xs, .rhs = W, .group_sizes = r.group_sizes});
  be.gmm({.out = mapped,
          .lhs = x,
          .rhs = W,
          .group_sizes = r.group_sizes,
          .rows = GmmRows{r.token, Tensor()}});
  EXPECT_EQ(max_abs_diff(plain, mapped), 0.0);
  // Forward with the un-permute folded into the row stores: row r lands at order[r].
  Tensor scattered = zeros({T * K, n});
  be.gmm({.out = scattered,
          .lhs = xs,
          .rhs = W,
          .group_sizes = r.group_sizes,
          .rows = GmmRows{Tensor(), r.order}});
  for (int64_t row = 0; row < T * K; ++row)
    for (int64_t j = 0; j < n; ++j)
      EXPECT_EQ(get_as_double(scattered, r.order.data<int32_t>()[row] * n + j),
                get_as_double(plain, row * n + j));
  // dlhs reading dout in token order and writing dlhs in token order.
  Tensor dout_sorted = zeros({T * K, n});
  for (int64_t row = 0; row < T * K; ++row)
    for (int64_t j = 0; j < n; ++j)
      set_from_double(dout_sorted, row * n + j,
                      get_as_double(dout_tok, r.order.data<int32_t>()[row] * n + j));
  Tensor dl_plain = zeros({T * K, D}), dl_mapped = zeros({T * K, D});
  be.gmm_dlhs({.dlhs = dl_plain, .dout = dout_sorted, .rhs = W, .group_sizes = r.group_sizes});
  be.gmm_dlhs({.dlhs = dl_mapped,
               .dout = dout_tok,
               .rhs = W,
               .group_sizes = r.group_sizes,
               .rows = GmmRows{r.order, r.order}});
  for (int64_t row = 0; row < T * K; ++row)
    for (int64_t c = 0; c < D; ++c)
      EXPECT_EQ(get_as_double(dl_mapped, r.order.data<int32_t>()[row] * D + c),
                get_as_double(dl_plain, row * D + c));
  // drhs gathering lhs from the tokens and dout from token order.
  Tensor dw_plain = zeros({E, n, D}), dw_mapped = zeros({E, n, D});
  be.gmm_drhs({.drhs = dw_plain, .lhs = xs, .dout = dout_sorted, .group_sizes = r.group_sizes});
  be.gmm_drhs({.drhs = dw_mapped,
               .lhs = x,
               .dout = dout_tok,
               .group_sizes = r.group_sizes,
               .rows = GmmRows{r.token, r.order}});
  EXPECT_EQ(max_abs_diff(dw_plain, dw_mapped), 0.0);
  // A map entry outside the tensor is an error, not a stray read.
  Tensor bad = zeros({T * K}, DType::I32);
  be.copy({.dst = bad, .src = r.token});
  bad.data<int32_t>()[3] = int32_t(T);
  EXPECT_THROW(be.gmm({.out = mapped,
                       .lhs = x,
                       .rhs = W,
                       .group_sizes = r.group_sizes,
                       .rows = GmmRows{bad, Tensor()}}),
               Error);
}

// A weight-row window is a slice of the fused product; accumulate adds.
TEST_F(ReferenceOps, GroupedMatmulWeightWindowsAreSlicesOfTheFusedProduct) {
  const int64_t m = 7, k = 5, F = 3, G = 3;
  Tensor sizes = ints({2, 0, 5});
  const Tensor lhs = rand({m, k}), W = rand({G, 2 * F, k}), dh = rand({m, 2 * F});
  Tensor fused = zeros({m, 2 * F}), gate = zeros({m, F}), up = zeros({m, F});
  be.gmm({.out = fused, .lhs = lhs, .rhs = W, .group_sizes = sizes});
  be.gmm({.out = gate,
          .lhs = lhs,
          .rhs = W,
          .group_sizes = sizes,
          .rows = GmmRows{Tensor(), Tensor(), 0, F}});
  be.gmm({.out = up,
          .lhs = lhs,
          .rhs = W,
          .group_sizes = sizes,
          .rows = GmmRows{Tensor(), Tensor(), F, F}});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < F; ++j) {
      EXPECT_EQ(get_as_double(gate, i * F + j), get_as_double(fused, i * 2 * F + j));
      EXPECT_EQ(get_as_double(up, i * F + j), get_as_double(fused, i * 2 * F + F + j));
    }
  Tensor dgate = zeros({m, F}), dup = zeros({m, F});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < F; ++j) {
      set_from_double(dgate, i * F + j, get_as_double(dh, i * 2 * F + j));
      set_from_double(dup, i * F + j, get_as_double(dh, i * 2 * F + F + j));
    }
  Tensor dl_fused = zeros({m, k}), dl_split = zeros({m, k});
  be.gmm_dlhs({.dlhs = dl_fused, .dout = dh, .rhs = W, .group_sizes = sizes});
  be.gmm_dlhs({.dlhs = dl_split,
               .dout = dgate,
               .rhs = W,
               .group_sizes = sizes,
               .rows = GmmRows{Tensor(), Tensor(), 0, F}});
  be.gmm_dlhs({.dlhs = dl_split,
               .dout = dup,
               .rhs = W,
               .group_sizes = sizes,
               .rows = GmmRows{Tensor(), Tensor(), F, F, true}});
  EXPECT_LE(max_abs_diff(dl_fused, dl_split), 1e-14);
  Tensor dw_fused = zeros({G, 2 * F, k}), dw_split = zeros({G, 2 * F, k});
  be.gmm_drhs({.drhs = dw_fused, .lhs = lhs, .dout = dh, .group_sizes = sizes});
  be.gmm_drhs({.drhs = dw_split,
               .lhs = lhs,
               .dout = dgate,
               .group_sizes = sizes,
               .rows = GmmRows{Tensor(), Tensor(), 0, F}});
  be.gmm_drhs({.drhs = dw_split,
               .lhs = lhs,
               .dout = dup,
               .group_sizes = sizes,
               .rows = GmmRows{Tensor(), Tensor(), F, F}});
  EXPECT_EQ(max_abs_diff(dw_fused, dw_split), 0.0);
}

}  // namespace
}  // namespace gemmax
