// GroupedGemmArgsKernel (bench/cutlass/gmm_grouped_args.h), the device-side arguments of CUTLASS's
// grouped GEMM, on the cuda emulator after GroupTableKernel, against arrays computed here from
// the group sizes: each product's shapes, pointers and strides; empty groups at the start, in
// the middle and at the end; weight windows; many small groups; sizes that do not add up.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "gemmax/backend/cuda/emu/emulated_backend.h"
#include "gmm_grouped_args.h"

namespace gemmax {
namespace {

using kern::GroupedProduct;

struct Arrays {
  std::vector<int32_t> shape;
  std::vector<const void*> a, b;
  std::vector<void*> d;
  std::vector<int64_t> lda, ldb, ldd;
  explicit Arrays(size_t G)
      : shape(3 * G, -1), a(G), b(G), d(G), lda(G, -1), ldb(G, -1), ldd(G, -1) {}
  kern::GroupedGemmArrays view() {
    return {shape.data(), a.data(), b.data(), d.data(), lda.data(), ldb.data(), ldd.data()};
  }
};

struct Case {
  std::vector<int32_t> sizes;
  int64_t k = 24, N = 40, w0 = 8, n = 16;
  int32_t out_bytes = 2;
};

// Runs both kernels on the emulator; returns what they wrote and the recorded error.
Arrays run(const Case& c, GroupedProduct product, const void* x, const void* y, void* out,
           int64_t m, kern::DeviceError* err) {
  const int64_t G = int64_t(c.sizes.size());
  cuda::EmuPlatform p;
  std::vector<int32_t> table(size_t(2 * (G + 1)), -1);
  cuda::Launch l;
  l.threads = 64;
  l.smem = kern::GroupTableKernel::smem_bytes(l.threads);
  p.launch<kern::GroupTableKernel>(l, table.data(), c.sizes.data(), G, m, int64_t(128), err,
                                   int32_t(kern::kOpGmm));
  Arrays arr{size_t(G)};
  const kern::GroupedGemmParams params{.product = product,
                                       .first_row = table.data(),
                                       .G = G,
                                       .m = m,
                                       .x = x,
                                       .y = y,
                                       .out = out,
                                       .k = c.k,
                                       .N = c.N,
                                       .w0 = c.w0,
                                       .n = c.n,
                                       .in_bytes = 2,
                                       .out_bytes = c.out_bytes};
  cuda::Launch g;
  g.gx = uint32_t(G);
  g.threads = 64;
  p.launch<kern::GroupedGemmArgsKernel>(g, params, arr.view());
  return arr;
}

// The expected arrays, from the sizes (clamped to m rows, as the kernel does).
void expect_arrays(const Case& c, GroupedProduct product, const Arrays& got, const char* x,
                   const char* y, char* out, int64_t m) {
  int64_t row0 = 0;
  for (size_t g = 0; g < c.sizes.size(); ++g) {
    SCOPED_TRACE("group " + std::to_string(g));
    const int64_t first = std::min<int64_t>(row0, m);
    const int64_t rows = std::min<int64_t>(row0 + c.sizes[g], m) - first;
    row0 += c.sizes[g];
    const int64_t window = (int64_t(g) * c.N + c.w0) * c.k;
    std::vector<int64_t> shape;
    const void *a, *b, *d;
    std::vector<int64_t> ld;
    switch (product) {
      case GroupedProduct::kForward:
        shape = {rows, c.n, c.k};
        a = x + first * c.k * 2, b = y + window * 2, d = out + first * c.n * c.out_bytes;
        ld = {c.k, c.k, c.n};
        break;
      case GroupedProduct::kDlhs:
        shape = {rows, c.k, c.n};
        a = x + first * c.n * 2, b = y + window * 2, d = out + first * c.k * c.out_bytes;
        ld = {c.n, c.k, c.k};
        break;
      case GroupedProduct::kDrhs:
        shape = {rows > 0 ? c.n : 0, c.k, rows};
        a = x + first * c.n * 2, b = y + first * c.k * 2, d = out + window * c.out_bytes;
        ld = {c.n, c.k, c.k};
        break;
    }
    EXPECT_EQ(got.shape[3 * g], shape[0]);
    EXPECT_EQ(got.shape[3 * g + 1], shape[1]);
    EXPECT_EQ(got.shape[3 * g + 2], shape[2]);
    EXPECT_EQ(got.a[g], a);
    EXPECT_EQ(got.b[g], b);
    EXPECT_EQ(got.d[g], d);
    EXPECT_EQ(got.lda[g], ld[0]);
    EXPECT_EQ(got.ldb[g], ld[1]);
    EXPECT_EQ(got.ldd[g], ld[2]);
  }
}

void check(const Case& c) {
  const int64_t G = int64_t(c.sizes.size());
  const int64_t m = std::accumulate(c.sizes.begin(), c.sizes.end(), int64_t(0));
  // Only addresses matter: real buffers, sized generously, that the kernel must not write.
  std::vector<char> x(size_t(std::max<int64_t>(m, 1) * std::max(c.k, c.n) * 2));
  std::vector<char> y(size_t(std::max(G * c.N * c.k, m * c.k) * 2));
  std::vector<char> out(size_t(std::max(G * c.N * c.k, m * std::max(c.k, c.n)) * c.out_bytes), 7);
  for (const GroupedProduct product :
       {GroupedProduct::kForward, GroupedProduct::kDlhs, GroupedProduct::kDrhs}) {
    SCOPED_TRACE("product " + std::to_string(int(product)));
    kern::DeviceError err{};
    std::fill(out.begin(), out.end(), char(7));
    const Arrays got = run(c, product, x.data(), y.data(), out.data(), m, &err);
    EXPECT_EQ(err.code, kern::DeviceError::kNone);
    expect_arrays(c, product, got, x.data(), y.data(), out.data(), m);
    EXPECT_EQ(out, std::vector<char>(out.size(), char(7)));
  }
}

TEST(GroupedGemmArgs, ShapesPointersAndStridesOfEachProductWithEmptyGroupsAndWindows) {
  check({.sizes = {0, 5, 0, 0, 130, 1, 0}});
}

TEST(GroupedGemmArgs, WholeWeightsAndFloat32Gradients) {
  check({.sizes = {3, 0, 9}, .k = 32, .N = 48, .w0 = 0, .n = 48, .out_bytes = 4});
}

TEST(GroupedGemmArgs, ManySmallGroups) {
  std::vector<int32_t> sizes(300);
  for (size_t g = 0; g < sizes.size(); ++g) sizes[g] = int32_t((g * 7) % 5);  // zeros among them
  check({.sizes = sizes, .k = 8, .N = 16, .w0 = 8, .n = 8});
}

TEST(GroupedGemmArgs, SizesThatDoNotAddUpAreRecordedAndClamped) {
  const Case c{.sizes = {4, 6, 5}};
  // The sizes add up to 15: the last group keeps 2 of its rows, as the kernel clamps.
  const int64_t m = 12;
  std::vector<char> x(size_t(m * 24 * 2)), y(size_t(3 * 40 * 24 * 2)), out(size_t(m * 24 * 2));
  kern::DeviceError err{};
  const Arrays got = run(c, GroupedProduct::kForward, x.data(), y.data(), out.data(), m, &err);
  EXPECT_EQ(err.code, kern::DeviceError::kGroupSizes);
  EXPECT_EQ(err.a, 15);
  EXPECT_EQ(err.b, m);
  expect_arrays(c, GroupedProduct::kForward, got, x.data(), y.data(), out.data(), m);
  EXPECT_EQ(got.shape[6], 2);
}

}  // namespace
}  // namespace gemmax
