// The reference backend's bfloat16 compute against float32.
//
// Every op of the reference backend runs twice on the same input values (drawn on the bf16
// grid, so both runs see identical numbers): once in fp32, once in bf16 with the fp32 master
// weights and fp32 weight-gradient outputs of mixed precision. A kernel sums in fp64 and
// rounds once, so each bf16 output is the fp32 output rounded to bf16: within half a bf16 ulp,
// 2^-9 relative (checked at 2^-8). fp32 outputs computed from the same bf16 inputs (weight
// gradients, statistics, router probabilities) must be identical. The whole model in bf16 is
// model/bf16_test.cc.
#include <gtest/gtest.h>

#include <cmath>

#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/base/convert.h"
#include "test_util.h"

namespace gemmax {
namespace {

constexpr double kHalfUlpMargin = 1.0 / 256;  // 2^-8: twice bf16's relative rounding error

class Bf16Ops : public ::testing::Test {
 protected:
  ReferenceBackend be;
  Rng rng{7};

  // Random fp32 values on the bf16 grid (exactly representable in both dtypes).
  Tensor grid(const Shape& s, double scale = 1.0) {
    return testing::random_bf16_grid(s, rng, scale);
  }
  static Tensor as(const Tensor& t, DType dt) { return convert_dtype(t, dt); }
  static Tensor ints(const std::vector<int32_t>& v) { return testing::int32_tensor(v); }
  static Tensor zeros(const Shape& s, DType dt) { return Tensor::zeros(s, dt); }

  // b (bf16) is f (fp32) rounded to bf16, element by element.
  static void expect_rounded(const std::string& what, const Tensor& f, const Tensor& b) {
    ASSERT_EQ(f.numel(), b.numel()) << what;
    ASSERT_EQ(b.dtype(), DType::BF16) << what;
    for (int64_t i = 0; i < f.numel(); ++i) {
      const double fv = get_as_double(f, i), bv = get_as_double(b, i);
      EXPECT_LE(std::abs(bv - fv), kHalfUlpMargin * std::abs(fv) + 1e-30)
          << what << "[" << i << "]: fp32 " << fv << " bf16 " << bv;
    }
  }
  static void expect_identical(const std::string& what, const Tensor& f, const Tensor& b) {
    ASSERT_EQ(f.numel(), b.numel()) << what;
    for (int64_t i = 0; i < f.numel(); ++i)
      EXPECT_EQ(get_as_double(f, i), get_as_double(b, i)) << what << "[" << i << "]";
  }
};

TEST_F(Bf16Ops, MatmulAndGroupedMatmul) {
  const Tensor a = grid({5, 6}), b = grid({7, 6}), c0 = grid({5, 7});
  for (bool acc : {false, true}) {
    Tensor cf = as(c0, DType::F32), cb = as(c0, DType::BF16);
    be.matmul({.c = cf, .a = a, .trans_a = false, .b = b, .trans_b = true, .accumulate = acc});
    be.matmul({.c = cb,
               .a = as(a, DType::BF16),
               .trans_a = false,
               .b = as(b, DType::BF16),
               .trans_b = true,
               .accumulate = acc});
    expect_rounded("matmul", cf, cb);
  }
  // A weight gradient: bf16 inputs, fp32 output accumulating onto fp32.
  const Tensor d = grid({5, 7});
  Tensor gf = as(grid({7, 6}), DType::F32), gb = as(gf, DType::F32);
  be.matmul({.c = gf, .a = d, .trans_a = true, .b = a, .trans_b = false, .accumulate = true});
  be.matmul({.c = gb,
             .a = as(d, DType::BF16),
             .trans_a = true,
             .b = as(a, DType::BF16),
             .trans_b = false,
             .accumulate = true});
  expect_identical("matmul into fp32", gf, gb);

  const Tensor sizes = ints({3, 0, 4, 1});
  const Tensor lhs = grid({8, 5}), rhs = grid({4, 6, 5}), dout = grid({8, 6});
  Tensor of = zeros({8, 6}, DType::F32), ob = zeros({8, 6}, DType::BF16);
  be.gmm({.out = of, .lhs = lhs, .rhs = rhs, .group_sizes = sizes});
  be.gmm(
      {.out = ob, .lhs = as(lhs, DType::BF16), .rhs = as(rhs, DType::BF16), .group_sizes = sizes});
  expect_rounded("gmm", of, ob);
  Tensor lf = zeros({8, 5}, DType::F32), lb = zeros({8, 5}, DType::BF16);
  be.gmm_dlhs({.dlhs = lf, .dout = dout, .rhs = rhs, .group_sizes = sizes});
  be.gmm_dlhs({.dlhs = lb,
               .dout = as(dout, DType::BF16),
               .rhs = as(rhs, DType::BF16),
               .group_sizes = sizes});
  expect_rounded("gmm_dlhs", lf, lb);
  Tensor rf = zeros({4, 6, 5}, DType::F32), rb = zeros({4, 6, 5}, DType::F32);
  be.gmm_drhs({.drhs = rf, .lhs = lhs, .dout = dout, .group_sizes = sizes});
  be.gmm_drhs({.drhs = rb,
               .lhs = as(lhs, DType::BF16),
               .dout = as(dout, DType::BF16),
               .group_sizes = sizes});
  expect_identical("gmm_drhs into fp32", rf, rb);
}

TEST_F(Bf16Ops, RmsNormWithFp32ScaleAndRope) {
  const Tensor x = grid({4, 9}, 3.0), w = grid({9}), dy = grid({4, 9});
  for (bool with_w : {true, false}) {
    const Tensor ww = with_w ? w : Tensor();
    Tensor yf = zeros({4, 9}, DType::F32), yb = zeros({4, 9}, DType::BF16);
    Tensor rf = zeros({4}, DType::F32), rb = zeros({4}, DType::F32);
    be.rmsnorm_forward({.y = yf,
                        .rstd = rf,
                        .x = x,
                        .w = ww,
                        .eps = 1e-6,
                        .out_scale = 0.7,
                        .round_before_scale = false});
    // fp32 scale: seed change 2 (norm scales in fp32, docs/SEED.md#each-change)
    be.rmsnorm_forward({.y = yb,
                        .rstd = rb,
                        .x = as(x, DType::BF16),
                        .w = ww,
                        .eps = 1e-6,
                        .out_scale = 0.7,
                        .round_before_scale = false});
    expect_rounded("rmsnorm y", yf, yb);
    expect_identical("rmsnorm rstd", rf, rb);
    Tensor dxf = zeros({4, 9}, DType::F32), dxb = zeros({4, 9}, DType::BF16);
    Tensor dwf = with_w ? zeros({9}, DType::F32) : Tensor(),
           dwb = with_w ? zeros({9}, DType::F32) : Tensor();
    be.rmsnorm_backward({.dx = dxf,
                         .dw = dwf,
                         .dy = dy,
                         .x = x,
                         .w = ww,
                         .rstd = rf,
                         .out_scale = 0.7,
                         .accumulate_dx = false});
    be.rmsnorm_backward({.dx = dxb,
                         .dw = dwb,
                         .dy = as(dy, DType::BF16),
                         .x = as(x, DType::BF16),
                         .w = ww,
                         .rstd = rb,
                         .out_scale = 0.7,
                         .accumulate_dx = false});
    expect_rounded("rmsnorm dx", dxf, dxb);
    if (with_w) expect_identical("rmsnorm dw (fp32)", dwf, dwb);
  }
  const Tensor q = grid({5, 2, 8}), pos = ints({0, 3, 1, 7, 2});
  Tensor freq = Tensor::empty({4}, DType::F64);
  for (int i = 0; i < 4; ++i) freq.data<double>()[i] = std::pow(100.0, -2.0 * i / 8);
  Tensor qf = as(q, DType::F32), qb = as(q, DType::BF16), table = zeros({5, 4, 2}, DType::F32);
  be.rope_table({.table = table, .positions = pos, .inv_freq = freq});
  be.rope({.x = qf, .table = table, .inverse = false});
  be.rope({.x = qb, .table = table, .inverse = false});
  expect_rounded("rope", qf, qb);
}

TEST_F(Bf16Ops, AttentionForwardAndBackward) {
  const AttentionShape s{2, 6, 4, 2, 5, 3};
  const int64_t T = 12;
  const Tensor q = grid({T, 4, 5}, 0.7), k = grid({T, 2, 5}, 0.7), v = grid({T, 2, 5});
  const Tensor dout = grid({T, 4, 5}), seg = ints({1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2});
  Tensor of = zeros({T, 4, 5}, DType::F32), ob = zeros({T, 4, 5}, DType::BF16);
  Tensor lf = zeros({2, 4, 6}, DType::F32), lb = zeros({2, 4, 6}, DType::F32);
  be.attention_forward(
      {.o = of, .lse = lf, .q = q, .k = k, .v = v, .segment_ids = seg, .shape = s});
  be.attention_forward({.o = ob,
                        .lse = lb,
                        .q = as(q, DType::BF16),
                        .k = as(k, DType::BF16),
                        .v = as(v, DType::BF16),
                        .segment_ids = seg,
                        .shape = s});
  expect_rounded("attention o", of, ob);
  expect_identical("attention lse (fp32, logits and softmax in fp32)", lf, lb);
  // The backward reads o: give both runs the bf16 forward's o.
  const Tensor o = as(ob, DType::F32);
  Tensor dqf = zeros({T, 4, 5}, DType::F32), dkf = zeros({T, 2, 5}, DType::F32),
         dvf = zeros({T, 2, 5}, DType::F32);
  Tensor dqb = zeros({T, 4, 5}, DType::BF16), dkb = zeros({T, 2, 5}, DType::BF16),
         dvb = zeros({T, 2, 5}, DType::BF16);
  be.attention_backward({.dq = dqf,
                         .dk = dkf,
                         .dv = dvf,
                         .dout = dout,
                         .q = q,
                         .k = k,
                         .v = v,
                         .o = o,
                         .lse = lf,
                         .segment_ids = seg,
                         .shape = s});
  be.attention_backward({.dq = dqb,
                         .dk = dkb,
                         .dv = dvb,
                         .dout = as(dout, DType::BF16),
                         .q = as(q, DType::BF16),
                         .k = as(k, DType::BF16),
                         .v = as(v, DType::BF16),
                         .o = ob,
                         .lse = lb,
                         .segment_ids = seg,
                         .shape = s});
  expect_rounded("attention dq", dqf, dqb);
  expect_rounded("attention dk", dkf, dkb);
  expect_rounded("attention dv", dvf, dvb);
}

TEST_F(Bf16Ops, GegluRouterAndDispatch) {
  const Tensor h = grid({3, 8}, 2.0), da = grid({3, 4});
  Tensor af = zeros({3, 4}, DType::F32), ab = zeros({3, 4}, DType::BF16);
  be.geglu_forward({.a = af, .h = h});
  be.geglu_forward({.a = ab, .h = as(h, DType::BF16)});
  expect_rounded("geglu", af, ab);
  Tensor dhf = zeros({3, 8}, DType::F32), dhb = zeros({3, 8}, DType::BF16);
  be.geglu_backward({.dh = dhf, .da = da, .h = h});
  be.geglu_backward({.dh = dhb, .da = as(da, DType::BF16), .h = as(h, DType::BF16)});
  expect_rounded("geglu dh", dhf, dhb);

  // Router: bf16 logits, fp32 softmax / weights, fp32 per-expert scale and its gradient.
  const int64_t T = 6, E = 5, K = 2, S = 3;
  const Tensor logits = grid({T, E}), pes = grid({E}, 0.3), dw = grid({T, K}), lb = grid({2, E});
  Tensor pf = zeros({T, E}, DType::F32), pb = zeros({T, E}, DType::F32);
  Tensor idf = zeros({T, K}, DType::I32), idb = zeros({T, K}, DType::I32);
  Tensor wf = zeros({T, K}, DType::F32), wb = zeros({T, K}, DType::F32);
  be.router_forward({.probs = pf,
                     .idx = idf,
                     .weights = wf,
                     .logits = logits,
                     .per_expert_scale = pes,
                     .renormalize = true});
  be.router_forward({.probs = pb,
                     .idx = idb,
                     .weights = wb,
                     .logits = as(logits, DType::BF16),
                     .per_expert_scale = pes,
                     .renormalize = true});
  expect_identical("router probs", pf, pb);
  expect_identical("router idx", idf, idb);
  expect_identical("router weights", wf, wb);
  Tensor dlf = zeros({T, E}, DType::F32), dlb = zeros({T, E}, DType::BF16);
  Tensor desf = zeros({E}, DType::F32), desb = zeros({E}, DType::F32);
  be.router_backward({.dlogits = dlf,
                      .dper_expert_scale = desf,
                      .dweights = dw,
                      .probs = pf,
                      .idx = idf,
                      .per_expert_scale = pes,
                      .renormalize = true,
                      .lb_dprobs = lb,
                      .seq = S});
  be.router_backward({.dlogits = dlb,
                      .dper_expert_scale = desb,
                      .dweights = dw,
                      .probs = pb,
                      .idx = idb,
                      .per_expert_scale = pes,
                      .renormalize = true,
                      .lb_dprobs = lb,
                      .seq = S});
  expect_rounded("router dlogits", dlf, dlb);
  expect_identical("router dper_expert_scale (fp32)", desf, desb);

  // Permute and the fp32 combine.
  const Tensor idx = ints({2, 0, 1, 2, 2, 3, 0, 2, 1, 0}).view({5, 2});
  Routing r{zeros({10}, DType::I32), zeros({10}, DType::I32), zeros({10}, DType::I32),
            zeros({4}, DType::I32)};
  be.route_sort({.routing = r, .idx = idx, .num_experts = 4});
  const Tensor x = grid({5, 3}), y = grid({10, 3}), cw = grid({5, 2}), dm = grid({5, 3});
  Tensor xsf = zeros({10, 3}, DType::F32), xsb = zeros({10, 3}, DType::BF16);
  be.permute({.xs = xsf, .x = x, .order = r.order, .k = 2});
  be.permute({.xs = xsb, .x = as(x, DType::BF16), .order = r.order, .k = 2});
  expect_identical("permute", xsf, xsb);
  Tensor dxf = zeros({5, 3}, DType::F32), dxb = zeros({5, 3}, DType::BF16);
  be.permute_backward({.dx = dxf, .dxs = y, .inverse = r.inverse, .k = 2, .accumulate = false});
  be.permute_backward(
      {.dx = dxb, .dxs = as(y, DType::BF16), .inverse = r.inverse, .k = 2, .accumulate = false});
  expect_rounded("permute_backward", dxf, dxb);
  Tensor mf = zeros({5, 3}, DType::F32), mb = zeros({5, 3}, DType::BF16);
  be.combine_forward({.m = mf, .y = y, .inverse = r.inverse, .weights = cw});
  be.combine_forward({.m = mb, .y = as(y, DType::BF16), .inverse = r.inverse, .weights = cw});
  expect_rounded("combine", mf, mb);
  Tensor dyf = zeros({10, 3}, DType::F32), dyb = zeros({10, 3}, DType::BF16);
  Tensor dcf = zeros({5, 2}, DType::F32), dcb = zeros({5, 2}, DType::F32);
  be.combine_backward(
      {.dy = dyf, .dweights = dcf, .dm = dm, .y = y, .order = r.order, .weights = cw});
  be.combine_backward({.dy = dyb,
                       .dweights = dcb,
                       .dm = as(dm, DType::BF16),
                       .y = as(y, DType::BF16),
                       .order = r.order,
                       .weights = cw});
  expect_rounded("combine dy", dyf, dyb);
  expect_identical("combine dweights (fp32)", dcf, dcb);
}

TEST_F(Bf16Ops, EmbeddingAndElementwise) {
  const Tensor table = grid({6, 3}), tokens = ints({4, 1, 4, 0}), dx = grid({4, 3});
  Tensor xf = zeros({4, 3}, DType::F32), xb = zeros({4, 3}, DType::BF16);
  be.embedding_forward({.x = xf, .tokens = tokens, .table = table, .scale = 2.5});
  be.embedding_forward(
      {.x = xb, .tokens = tokens, .table = table, .scale = 2.5});  // fp32 table, bf16 activations
  expect_rounded("embedding", xf, xb);
  Tensor tf = zeros({6, 3}, DType::F32), tb = zeros({6, 3}, DType::F32);
  be.embedding_backward({.dtable = tf, .dx = dx, .tokens = tokens, .scale = 2.5});
  be.embedding_backward({.dtable = tb, .dx = as(dx, DType::BF16), .tokens = tokens, .scale = 2.5});
  expect_identical("embedding dtable (fp32)", tf, tb);

  const Tensor a = grid({50}), b = grid({50});
  Tensor sf = zeros({50}, DType::F32), sb = zeros({50}, DType::BF16);
  be.add({.out = sf, .a = a, .b = b});
  be.add({.out = sb, .a = as(a, DType::BF16), .b = as(b, DType::BF16)});
  expect_rounded("add", sf, sb);
  // Two roundings now stand between the bf16 and fp32 results: the sum's and the product's.
  be.scale({.x = sf, .alpha = 0.3});
  be.scale({.x = sb, .alpha = 0.3});
  for (int64_t i = 0; i < 50; ++i)
    EXPECT_NEAR(get_as_double(sb, i), get_as_double(sf, i),
                2 * kHalfUlpMargin * std::abs(get_as_double(sf, i)));
  // Sums of squares of the same values in bf16 and fp32 are identical (fp64 sums).
  Tensor sqb = zeros({1}, DType::F64), sqf = zeros({1}, DType::F64);
  be.sum_squares({.sum = sqb, .x = as(a, DType::BF16)});
  be.sum_squares({.sum = sqf, .x = a});
  EXPECT_EQ(get_as_double(sqb, 0), get_as_double(sqf, 0));
  // fp32 <-> bf16 copies round once.
  const Tensor big = grid({64}, 1e3);
  Tensor c = zeros({64}, DType::BF16);
  be.copy({.dst = c, .src = big});
  expect_identical("copy to bf16", big, c);
}

TEST_F(Bf16Ops, SoftcapCrossEntropy) {
  // bf16 logits: the soft-cap is rounded to bf16 before the fp32 loss (MaxText: bf16 dot and
  // soft-cap, then fp32), so each capped logit moves by up to 2^-9 |c|. The loss of a row
  // moves by at most twice that; the gradient by a few percent of its norm.
  const int64_t C = 4, V = 50;
  const double cap = 30;
  const Tensor z = grid({C, V}, 4.0), targets = ints({3, 0, 49, 2}), mask = ints({1, 0, 1, 1});
  Tensor lf = as(z, DType::F32), lb = as(z, DType::BF16);
  Tensor sf = zeros({1}, DType::F64), sb = zeros({1}, DType::F64);
  be.softcap_cross_entropy({.logits = lf,
                            .loss = sf,
                            .targets = targets,
                            .mask = mask,
                            .cap = cap,
                            .grad_scale = 1.0,
                            .write_grad = true});
  be.softcap_cross_entropy({.logits = lb,
                            .loss = sb,
                            .targets = targets,
                            .mask = mask,
                            .cap = cap,
                            .grad_scale = 1.0,
                            .write_grad = true});
  const double loss_f = get_as_double(sf, 0), loss_b = get_as_double(sb, 0);
  double max_c = 0;
  for (int64_t i = 0; i < z.numel(); ++i)
    max_c = std::max(max_c, std::abs(cap * std::tanh(get_as_double(z, i) / cap)));
  EXPECT_LE(std::abs(loss_b - loss_f), 3 * 2 * std::ldexp(max_c, -9)) << loss_f << " " << loss_b;
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < lf.numel(); ++i) {
    diff += std::pow(get_as_double(lf, i) - get_as_double(lb, i), 2);
    norm += std::pow(get_as_double(lf, i), 2);
  }
  EXPECT_LE(std::sqrt(diff / norm), 0.05);
}

}  // namespace
}  // namespace gemmax
