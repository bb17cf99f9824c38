// Conformance cases (op_conformance.h): quantised weights; and the contract of their op.
#include <cmath>
#include <string>
#include <vector>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/base/nf4.h"
#include "op_conformance.h"
#include "test_util.h"

namespace gemmax::conformance {

// NF4 weights read back on every backend as the format says: code value times its block's scale,
// in float32, rounded once to the output's dtype. The truth is that definition, on the host: the
// harness's fp64 reference run would widen the float32 scales, which the op takes as they are
// stored. Odd sizes (the last low nibble unread), a last block cut short, blocks of 2, a block of
// zeros, and every byte value.
CONFORMANCE_CASE(DequantizeNf4EveryDtypeAndBlock) {
  struct Size {
    Shape shape;
    int64_t block;
  };
  Backend& be = h.be();
  for (DType dt : {DType::F32, DType::BF16, DType::F64})
    for (const Size& z : {Size{{1001}, 64}, Size{{6, 100}, 2}, Size{{3, 333}, 128},
                          Size{{4099}, 64}, Size{{1}, 64}, Size{{17, 31}, 16}}) {
      const int64_t n = shape_numel(z.shape), blocks = nf4_blocks(n, z.block);
      std::vector<float> x(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) x[size_t(i)] = i < z.block ? 0.0f : float(h.rng().normal());
      Tensor codes = Tensor::empty({nf4_code_bytes(n)}, DType::U8);
      Tensor absmax = Tensor::empty({blocks}, DType::F32);
      uint8_t* q = codes.data<uint8_t>();
      nf4_quantize(x.data(), n, z.block, q, absmax.data<float>());
      if (z.block == 16)  // every byte: each pair of indices
        for (int64_t j = 0; j < codes.numel(); ++j) q[j] = uint8_t(j * 37);
      const Tensor out = be.alloc(z.shape, dt, MemKind::Workspace);
      be.dequantize_nf4({.out = out,
                         .codes = be.to_device(codes, MemKind::Workspace),
                         .absmax = be.to_device(absmax, MemKind::Workspace),
                         .block = z.block});
      const Tensor got = be.to_host(out);
      // The float32 product: exact in double, rounded once to float32 (then once to dt).
      Tensor want = Tensor::empty(z.shape, DType::F32);
      for (int64_t i = 0; i < n; ++i) {
        const int index = i % 2 == 0 ? q[i / 2] >> 4 : q[i / 2] & 15;
        want.data<float>()[i] =
            float(double(nf4_value(uint32_t(index))) * double(absmax.data<float>()[i / z.block]));
      }
      h.expect_exact("dequantize_nf4 " + shape_str(z.shape) + " block " + std::to_string(z.block),
                     got, want);
    }
}

TEST(QuantizeOpContract, DequantizeNf4RefusesWrongOperands) {
  auto be = make_backend("reference");
  const Tensor out = Tensor::empty({5, 3}, DType::BF16);
  const Tensor codes = Tensor::zeros({8}, DType::U8), absmax = Tensor::zeros({2}, DType::F32);
  be->dequantize_nf4({.out = out, .codes = codes, .absmax = absmax, .block = 8});  // fine
  testing::expect_error(
      [&] {
        be->dequantize_nf4(
            {.out = out, .codes = Tensor::zeros({7}, DType::U8), .absmax = absmax, .block = 8});
      },
      {"dequantize_nf4", "15 elements", "8 bytes", "uint8[7]"});
  testing::expect_error(
      [&] { be->dequantize_nf4({.out = out, .codes = codes, .absmax = absmax, .block = 4}); },
      {"dequantize_nf4", "blocks of 4", "float32 absmax of 4 elements", "float32[2]"});
  testing::expect_error(
      [&] {
        be->dequantize_nf4(
            {.out = out, .codes = codes, .absmax = Tensor::zeros({2}, DType::F64), .block = 8});
      },
      {"float32 absmax", "float64[2]"});
  for (int64_t block : {0, 1, 7})
    testing::expect_error(
        [&] { be->dequantize_nf4({.out = out, .codes = codes, .absmax = absmax, .block = block}); },
        {"dequantize_nf4", "even and at least 2", std::to_string(block)});
  testing::expect_error(
      [&] {
        be->dequantize_nf4(
            {.out = Tensor::zeros({15}, DType::I32), .codes = codes, .absmax = absmax, .block = 8});
      },
      {"bfloat16, float32 or float64", "int32[15]"});
}

}  // namespace gemmax::conformance
