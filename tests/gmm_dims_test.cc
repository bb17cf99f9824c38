// The grouped matmuls' derived sizes (GmmDims, from validate) and the host backends' row map
// checks.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gemmax/backend/backend_factory.h"
#include "op_conformance.h"
#include "test_util.h"

namespace gemmax {
namespace {

Tensor ints(const std::vector<int32_t>& v) { return conformance::Harness::ints(v); }

Tensor zeros(const Shape& shape, DType dtype = DType::F32) {
  Tensor t = Tensor::empty(shape, dtype);
  std::memset(t.raw(), 0, t.nbytes());
  return t;
}

void expect_dims(const GmmDims& got, const GmmDims& want) {
  EXPECT_EQ(got.m, want.m);
  EXPECT_EQ(got.k, want.k);
  EXPECT_EQ(got.G, want.G);
  EXPECT_EQ(got.N, want.N);
  EXPECT_EQ(got.w0, want.w0);
  EXPECT_EQ(got.n, want.n);
  EXPECT_EQ(got.in_rows, want.in_rows);
  EXPECT_EQ(got.out_rows, want.out_rows);
}

// Five sorted rows gathered from 7 tokens (k = 4) through the up half (rows [3, 6)) of two
// groups' fused [6, 4] weights; the output side scattered into 9 rows for gmm_dlhs.
TEST(GmmDims, ValidateDerivesTheSizesOfEachProduct) {
  const Tensor tokens = zeros({7, 4}), w = zeros({2, 6, 4}), sizes = ints({2, 3});
  const Tensor gather = ints({6, 0, 6, 2, 1}), scatter = ints({8, 0, 3, 5, 1});
  GmmRows up{.in = gather, .weight_begin = 3, .weight_rows = 3};
  expect_dims(validate(GmmArgs{
                  .out = zeros({5, 3}), .lhs = tokens, .rhs = w, .group_sizes = sizes, .rows = up}),
              {.m = 5, .k = 4, .G = 2, .N = 6, .w0 = 3, .n = 3, .in_rows = 7, .out_rows = 5});
  // weight_rows -1: the rows from weight_begin to the end.
  const GmmRows rest{.in = gather, .weight_begin = 3};
  expect_dims(
      validate(GmmArgs{
          .out = zeros({5, 3}), .lhs = tokens, .rhs = w, .group_sizes = sizes, .rows = rest}),
      {.m = 5, .k = 4, .G = 2, .N = 6, .w0 = 3, .n = 3, .in_rows = 7, .out_rows = 5});
  const GmmRows back{.out = scatter, .weight_begin = 0, .weight_rows = 3};
  expect_dims(validate(GmmDlhsArgs{.dlhs = zeros({5, 4}),
                                   .dout = zeros({9, 3}),
                                   .rhs = w,
                                   .group_sizes = sizes,
                                   .rows = back}),
              {.m = 5, .k = 4, .G = 2, .N = 6, .w0 = 0, .n = 3, .in_rows = 5, .out_rows = 9});
  // gmm_drhs has no tensor of m rows: m is the gather's length.
  expect_dims(validate(GmmDrhsArgs{.drhs = zeros({2, 6, 4}),
                                   .lhs = tokens,
                                   .dout = zeros({5, 3}),
                                   .group_sizes = sizes,
                                   .rows = up}),
              {.m = 5, .k = 4, .G = 2, .N = 6, .w0 = 3, .n = 3, .in_rows = 7, .out_rows = 5});
  testing::expect_error(
      [&] {
        validate(GmmArgs{.out = zeros({5, 4}),
                         .lhs = tokens,
                         .rhs = w,
                         .group_sizes = sizes,
                         .rows = {.in = gather, .weight_begin = 4, .weight_rows = 4}});
      },
      {"gmm", "weight rows [4, 8) of 6"});
}

// The host backends check every row map entry against the rows of the tensor it indexes.
TEST(GmmDims, HostBackendsRefuseARowMapEntryOutOfRange) {
  const Tensor tokens = zeros({7, 4}), w = zeros({2, 6, 4}), sizes = ints({2, 3});
  for (const char* name : {"reference", "cpu"}) {
    SCOPED_TRACE(name);
    const std::unique_ptr<Backend> be = make_backend(std::string(name));
    const Tensor out = zeros({5, 6}), dlhs = zeros({5, 4}), dout = zeros({5, 6});
    testing::expect_error(
        [&] {
          be->gmm({.out = out,
                   .lhs = tokens,
                   .rhs = w,
                   .group_sizes = sizes,
                   .rows = {.in = ints({6, 7, 0, 1, 2})}});
        },
        {"gmm lhs row map entry 7 at 1 is outside [0, 7)"});
    testing::expect_error(
        [&] {
          be->gmm_dlhs({.dlhs = dlhs,
                        .dout = dout,
                        .rhs = w,
                        .group_sizes = sizes,
                        .rows = {.out = ints({0, 1, 2, 3, -1})}});
        },
        {"gmm_dlhs dout row map entry -1 at 4 is outside [0, 5)"});
    testing::expect_error(
        [&] {
          be->gmm_drhs({.drhs = zeros({2, 6, 4}),
                        .lhs = tokens,
                        .dout = dout,
                        .group_sizes = sizes,
                        .rows = {.in = ints({0, 1, 2, 3, 9})}});
        },
        {"gmm_drhs lhs row map entry 9 at 4 is outside [0, 7)"});
  }
}

}  // namespace
}  // namespace gemmax
