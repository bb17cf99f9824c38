// The grouped matmuls' derived sizes (GmmDims, from validate) and the cuda backend's choice of
// kernels for them, on the emulator: every fast path checks the alignment of every operand it
// reads or writes.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/backend/cuda/emu/emulated_backend.h"
#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/base/rng.h"
#include "cuda_paths.h"
#include "op_conformance.h"
#include "test_util.h"

namespace gemmax {
namespace {

using testing::copy_for;
using testing::host_clone;
using testing::host_result;

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

// A bfloat16 drhs one element into its buffer (2 bytes off 16) with cuda_gmm=sm90: the sm90
// kernels store pairs of bfloat16 as one 32-bit word, which a GPU refuses at that address, so
// the call runs the plain kernels and says so, as the mma path does.
TEST(GmmPaths, Sm90DrhsRefusesADrhsThatIsNotAligned) {
  const int64_t G = 2, m = 16, k = 16, N = 16;
  Rng rng{5};
  const Tensor lhs = testing::random_tensor({m, k}, rng, 1.0, DType::BF16);
  const Tensor dout = testing::random_tensor({m, N}, rng, 1.0, DType::BF16);
  const Tensor buffer = testing::random_tensor({1 + G * N * k}, rng, 1.0, DType::BF16);
  const Tensor sizes = ints({9, 7});

  ReferenceBackend ref;
  const Tensor want = host_clone(buffer);
  ref.gmm_drhs(
      {.drhs = want.flat_slice(1, {G, N, k}), .lhs = lhs, .dout = dout, .group_sizes = sizes});

  const std::unique_ptr<Backend> be =
      testing::cuda_backend(false, &BackendOptions::cuda_gmm, "sm90");
  const cuda::SlowPathNotes& notes =
      dynamic_cast<cuda::EmulatedBackend&>(*be).platform().slow_paths();
  const Tensor got = copy_for(*be, buffer);
  const Tensor drhs = got.flat_slice(1, {G, N, k});
  ASSERT_NE(reinterpret_cast<uintptr_t>(drhs.raw()) % 16, 0u);
  be->gmm_drhs({.drhs = drhs,
                .lhs = copy_for(*be, lhs),
                .dout = copy_for(*be, dout),
                .group_sizes = copy_for(*be, sizes)});
  EXPECT_EQ(notes.count(), 1u) << "gmm_drhs ran the sm90 kernels on a drhs off 16 bytes";
  testing::expect_close_bf16("drhs", host_result(*be, got), want);
}

}  // namespace
}  // namespace gemmax
