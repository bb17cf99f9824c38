// Every op of the cpu backend against the reference backend on the same random inputs, in fp32
// and bf16 (inputs on the bf16 grid, so both backends see the same numbers), with each kernel
// family this CPU runs forced by cpu_kernels (isa.h: always avx2 and amx_emulated; avx512_fp32,
// avx512_bf16 and amx where the CPU has them), at odd sizes, with empty expert groups, windows
// longer than the sequence and several segments.
//
// Tolerances: fp32 results within 1e-5 of the largest reference value (the cpu backend sums
// in fp32, the reference in fp64); bf16 results within 2^-7 of it (both round once to bf16 from
// results a few fp32 ulps apart), unless a test says otherwise.
#include "gemmax/backend/backend_factory.h"
#include "gemmax/backend/cpu/cpu_backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/base/convert.h"
#include "gemmax/model/gemma4.h"
#include "test_util.h"

namespace gemmax {
namespace {

struct Path {
  const char* name;
  std::string isa;
};
void PrintTo(const Path& p, std::ostream* os) { *os << p.name; }

std::vector<Path> paths() {
  std::vector<Path> v;
  for (cpu::Isa isa : {cpu::Isa::Portable, cpu::Isa::AmxEmulated, cpu::Isa::Avx512Fp32,
                       cpu::Isa::Avx512Bf16, cpu::Isa::Amx})
    if (cpu::isa_runs_here(isa)) v.push_back({cpu::isa_name(isa), cpu::isa_name(isa)});
  return v;
}

class CpuOps : public ::testing::TestWithParam<Path> {
 protected:
  ReferenceBackend ref;
  std::unique_ptr<CpuBackend> cpu;
  Rng rng{11};

  void SetUp() override {
    BackendOptions o;
    o.name = "cpu";
    o.num_threads = 2;
    o.isa = GetParam().isa;
    cpu = std::make_unique<CpuBackend>(o);
  }

  // Random values on the bf16 grid, in dtype dt.
  Tensor grid(const Shape& s, DType dt, double scale = 1.0) {
    Tensor t = Tensor::empty(s, dt);
    for (int64_t i = 0; i < t.numel(); ++i)
      set_from_double(t, i, double(float(bf16(scale * rng.normal()))));
    return t;
  }
  static Tensor clone(const Tensor& t) { return convert_dtype(t, t.dtype()); }
  static Tensor ints(const std::vector<int32_t>& v) {
    Tensor t = Tensor::empty({int64_t(v.size())}, DType::I32);
    std::copy(v.begin(), v.end(), t.data<int32_t>());
    return t;
  }
  static Tensor zeros(const Shape& s, DType dt) { return Tensor::zeros(s, dt); }
  static double tol(DType dt) { return dt == DType::BF16 ? 1.0 / 128 : 1e-5; }

  // |got - want| <= rtol * max|want| + atol, element by element.
  static void expect_near(const std::string& what, const Tensor& want, const Tensor& got,
                          double rtol, double atol = 1e-30) {
    ASSERT_EQ(want.numel(), got.numel()) << what;
    double scale = 0;
    for (int64_t i = 0; i < want.numel(); ++i)
      scale = std::max(scale, std::abs(get_as_double(want, i)));
    int failures = 0;
    for (int64_t i = 0; i < want.numel() && failures < 5; ++i) {
      const double w = get_as_double(want, i), g = get_as_double(got, i);
      if (!(std::abs(w - g) <= rtol * scale + atol)) {
        ++failures;
        ADD_FAILURE() << what << "[" << i << "]: reference " << w << " cpu " << g << " (scale "
                      << scale << ")";
      }
    }
  }
  static void expect_equal(const std::string& what, const Tensor& want, const Tensor& got) {
    ASSERT_EQ(want.nbytes(), got.nbytes()) << what;
    EXPECT_EQ(0, std::memcmp(want.raw(), got.raw(), want.nbytes())) << what;
  }
};

const DType kDtypes[] = {DType::F32, DType::BF16};

TEST_P(CpuOps, ElementwiseAndReductions) {
  for (DType dt : kDtypes) {
    const Tensor a = grid({3, 37}, dt), b = grid({3, 37}, dt);
    Tensor r1 = zeros({3, 37}, dt), c1 = zeros({3, 37}, dt);
    ref.add({.out = r1, .a = a, .b = b});
    cpu->add({.out = c1, .a = a, .b = b});
    expect_near("add", r1, c1, tol(dt));
    ref.axpy({.y = r1, .alpha = 0.3, .x = a});
    cpu->axpy({.y = c1, .alpha = 0.3, .x = a});
    expect_near("axpy", r1, c1, 2 * tol(dt));
    ref.scale({.x = r1, .alpha = -1.7});
    cpu->scale({.x = c1, .alpha = -1.7});
    expect_near("scale", r1, c1, 2 * tol(dt));
    Tensor f32 = zeros({3, 37}, DType::F32);
    cpu->copy({.dst = f32, .src = a});
    expect_near("copy to fp32", a, f32, 0);
    Tensor rs = zeros({1}, DType::F64), cs = zeros({1}, DType::F64);
    ref.sum_squares({.sum = rs, .x = a});
    cpu->sum_squares({.sum = cs, .x = a});
    EXPECT_NEAR(get_as_double(cs, 0), get_as_double(rs, 0), 1e-12 * get_as_double(rs, 0));
    // y = (a + b) * s and its backward.
    const Tensor s = grid({1}, DType::F32), dy = grid({3, 37}, dt);
    Tensor yr = zeros({3, 37}, dt), yc = zeros({3, 37}, dt);
    ref.scaled_sum_forward({.y = yr, .a = a, .b = b, .s = s});
    cpu->scaled_sum_forward({.y = yc, .a = a, .b = b, .s = s});
    expect_near("scaled_sum y", yr, yc, tol(dt));
    Tensor dr = zeros({3, 37}, dt), dc = zeros({3, 37}, dt);
    Tensor dsr = zeros({1}, DType::F32), dsc = zeros({1}, DType::F32);
    ref.scaled_sum_backward({.dab = dr, .ds = dsr, .dy = dy, .a = a, .b = b, .s = s});
    cpu->scaled_sum_backward({.dab = dc, .ds = dsc, .dy = dy, .a = a, .b = b, .s = s});
    expect_near("scaled_sum dab", dr, dc, tol(dt));
    expect_near("scaled_sum ds", dsr, dsc, 1e-5);
    const Tensor grouped = grid({3, 37, 45}, dt);
    Tensor tr = zeros({3, 45, 37}, dt), tc = zeros({3, 45, 37}, dt);
    ref.transpose_groups({.out = tr, .in = grouped});
    cpu->transpose_groups({.out = tc, .in = grouped});
    expect_equal("transpose_groups", tr, tc);
  }
}

TEST_P(CpuOps, MatmulInEveryTransposition) {
  for (DType dt : kDtypes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool acc : {false, true}) {
          const int64_t M = 19, N = 45, K = 37;
          const Tensor a = grid(ta ? Shape{K, M} : Shape{M, K}, dt);
          const Tensor b = grid(tb ? Shape{N, K} : Shape{K, N}, dt);
          const Tensor c0 = grid({M, N}, dt);
          Tensor cr = clone(c0), cc = clone(c0);
          ref.matmul({.c = cr, .a = a, .trans_a = ta, .b = b, .trans_b = tb, .accumulate = acc});
          cpu->matmul({.c = cc, .a = a, .trans_a = ta, .b = b, .trans_b = tb, .accumulate = acc});
          expect_near("matmul " + std::to_string(ta) + std::to_string(tb) + std::to_string(acc), cr,
                      cc, tol(dt));
        }
  // bf16 inputs into an fp32 weight gradient (accumulating), a reduction over many rows.
  const Tensor d = grid({700, 24}, DType::BF16), x = grid({700, 40}, DType::BF16);
  const Tensor g0 = grid({24, 40}, DType::F32);
  Tensor gr = clone(g0), gc = clone(g0);
  ref.matmul({.c = gr, .a = d, .trans_a = true, .b = x, .trans_b = false, .accumulate = true});
  cpu->matmul({.c = gc, .a = d, .trans_a = true, .b = x, .trans_b = false, .accumulate = true});
  expect_near("weight gradient", gr, gc, 1e-5);
}

TEST_P(CpuOps, EmbeddingLookupAndGradient) {
  const Tensor tokens = ints({4, 1, 4, 0, 5, 4});
  for (DType dt : kDtypes) {
    const Tensor table = grid({6, 33}, DType::F32), dx = grid({6, 33}, dt);
    Tensor xr = zeros({6, 33}, dt), xc = zeros({6, 33}, dt);
    ref.embedding_forward({.x = xr, .tokens = tokens, .table = table, .scale = 2.5});
    cpu->embedding_forward({.x = xc, .tokens = tokens, .table = table, .scale = 2.5});
    expect_near("embedding", xr, xc, tol(dt));
    Tensor tr = grid({6, 33}, DType::F32), tc = clone(tr);
    ref.embedding_backward({.dtable = tr, .dx = dx, .tokens = tokens, .scale = 2.5});
    cpu->embedding_backward({.dtable = tc, .dx = dx, .tokens = tokens, .scale = 2.5});
    expect_near("embedding dtable", tr, tc, 1e-6);
  }
  Tensor x = zeros({1, 33}, DType::F32);
  EXPECT_THROW(cpu->embedding_forward(
                   {.x = x, .tokens = ints({6}), .table = grid({6, 33}, DType::F32), .scale = 1.0}),
               Error);
}

TEST_P(CpuOps, RmsNormForwardAndBackward) {
  for (DType dt : kDtypes)
    for (bool with_w : {true, false})
      for (bool residual : {false, true})
        for (bool round_first : {false, true}) {
          const int64_t rows = 150, n = 70;
          const Tensor x = grid({rows, n}, dt, 3.0), w = with_w ? grid({n}, DType::F32) : Tensor();
          const Tensor res = residual ? grid({rows, n}, dt) : Tensor(), dy = grid({rows, n}, dt);
          Tensor yr = zeros({rows, n}, dt), yc = zeros({rows, n}, dt);
          Tensor rr = zeros({rows}, DType::F32), rc = zeros({rows}, DType::F32);
          ref.rmsnorm_forward({.y = yr,
                               .rstd = rr,
                               .x = x,
                               .w = w,
                               .eps = 1e-6,
                               .out_scale = 0.7,
                               .residual = res,
                               .round_before_scale = round_first});
          cpu->rmsnorm_forward({.y = yc,
                                .rstd = rc,
                                .x = x,
                                .w = w,
                                .eps = 1e-6,
                                .out_scale = 0.7,
                                .residual = res,
                                .round_before_scale = round_first});
          const std::string what = std::string(dtype_name(dt)) + (with_w ? " w" : "") +
                                   (residual ? " residual" : "") + (round_first ? " round" : "");
          expect_near("rmsnorm y " + what, yr, yc, tol(dt));
          expect_near("rmsnorm rstd " + what, rr, rc, 1e-6);
          Tensor dxr = grid({rows, n}, dt), dxc = clone(dxr);
          Tensor dwr = with_w ? grid({n}, DType::F32) : Tensor(),
                 dwc = with_w ? clone(dwr) : Tensor();
          ref.rmsnorm_backward({.dx = dxr,
                                .dw = dwr,
                                .dy = dy,
                                .x = x,
                                .w = w,
                                .rstd = rr,
                                .out_scale = 0.7,
                                .accumulate_dx = residual});
          cpu->rmsnorm_backward({.dx = dxc,
                                 .dw = dwc,
                                 .dy = dy,
                                 .x = x,
                                 .w = w,
                                 .rstd = rr,
                                 .out_scale = 0.7,
                                 .accumulate_dx = residual});
          expect_near("rmsnorm dx " + what, dxr, dxc, 2 * tol(dt));
          if (with_w) expect_near("rmsnorm dw " + what, dwr, dwc, 1e-5);
        }
}

TEST_P(CpuOps, RopeTableAndRotation) {
  const Tensor pos = ints({0, 3, 1, 7, 2, 1000, 31});
  Tensor freq = Tensor::empty({6}, DType::F64);
  for (int i = 0; i < 6; ++i) freq.data<double>()[i] = i < 4 ? std::pow(1e4, -2.0 * i / 12) : 0.0;
  Tensor tr = zeros({7, 6, 2}, DType::F32), tc = zeros({7, 6, 2}, DType::F32);
  ref.rope_table({.table = tr, .positions = pos, .inv_freq = freq});
  cpu->rope_table({.table = tc, .positions = pos, .inv_freq = freq});
  expect_equal("rope table", tr, tc);
  for (DType dt : kDtypes)
    for (bool inverse : {false, true}) {
      Tensor xr = grid({7, 3, 12}, dt), xc = clone(xr);
      ref.rope({.x = xr, .table = tr, .inverse = inverse});
      cpu->rope({.x = xc, .table = tc, .inverse = inverse});
      expect_near("rope", xr, xc, tol(dt));
    }
}

TEST_P(CpuOps, GegluFusedAndSplit) {
  for (DType dt : kDtypes) {
    const int64_t m = 29, F = 37;
    const Tensor h = grid({m, 2 * F}, dt, 2.0), da = grid({m, F}, dt);
    Tensor ar = zeros({m, F}, dt), ac = zeros({m, F}, dt);
    ref.geglu_forward({.a = ar, .h = h});
    cpu->geglu_forward({.a = ac, .h = h});
    expect_near("geglu", ar, ac, tol(dt));
    Tensor dr = zeros({m, 2 * F}, dt), dc = zeros({m, 2 * F}, dt);
    ref.geglu_backward({.dh = dr, .da = da, .h = h});
    cpu->geglu_backward({.dh = dc, .da = da, .h = h});
    expect_near("geglu dh", dr, dc, tol(dt));
    const Tensor gate = grid({m, F}, dt, 2.0), up = grid({m, F}, dt);
    ref.geglu_forward({.a = ar, .h = gate, .up = up});
    cpu->geglu_forward({.a = ac, .h = gate, .up = up});
    expect_near("geglu split", ar, ac, tol(dt));
    Tensor dgr = zeros({m, F}, dt), dgc = zeros({m, F}, dt), dur = zeros({m, F}, dt),
           duc = zeros({m, F}, dt);
    ref.geglu_backward({.dh = dgr, .dup = dur, .da = da, .h = gate, .up = up});
    cpu->geglu_backward({.dh = dgc, .dup = duc, .da = da, .h = gate, .up = up});
    expect_near("geglu split dgate", dgr, dgc, tol(dt));
    expect_near("geglu split dup", dur, duc, tol(dt));
  }
}

TEST_P(CpuOps, RouterAndLoadBalance) {
  const int64_t T = 30, E = 11, K = 3, S = 10;
  for (DType dt : kDtypes)
    for (bool renorm : {true, false}) {
      Tensor logits = grid({T, E}, dt, 2.0);
      set_from_double(logits, 5, get_as_double(logits, 4));  // a tie: the lower id goes first
      const Tensor pes = grid({E}, DType::F32, 0.3), dw = grid({T, K}, DType::F32);
      const Tensor lb = grid({T / S, E}, DType::F32);
      Tensor pr = zeros({T, E}, DType::F32), pc = zeros({T, E}, DType::F32);
      Tensor ir = zeros({T, K}, DType::I32), ic = zeros({T, K}, DType::I32);
      Tensor wr = zeros({T, K}, DType::F32), wc = zeros({T, K}, DType::F32);
      ref.router_forward({.probs = pr,
                          .idx = ir,
                          .weights = wr,
                          .logits = logits,
                          .per_expert_scale = pes,
                          .renormalize = renorm});
      cpu->router_forward({.probs = pc,
                           .idx = ic,
                           .weights = wc,
                           .logits = logits,
                           .per_expert_scale = pes,
                           .renormalize = renorm});
      expect_equal("router idx", ir, ic);
      expect_near("router probs", pr, pc, 1e-6);
      expect_near("router weights", wr, wc, 1e-6);
      Tensor dlr = zeros({T, E}, dt), dlc = zeros({T, E}, dt);
      Tensor der = grid({E}, DType::F32), dec = clone(der);
      ref.router_backward({.dlogits = dlr,
                           .dper_expert_scale = der,
                           .dweights = dw,
                           .probs = pr,
                           .idx = ir,
                           .per_expert_scale = pes,
                           .renormalize = renorm,
                           .lb_dprobs = lb,
                           .seq = S});
      cpu->router_backward({.dlogits = dlc,
                            .dper_expert_scale = dec,
                            .dweights = dw,
                            .probs = pr,
                            .idx = ir,
                            .per_expert_scale = pes,
                            .renormalize = renorm,
                            .lb_dprobs = lb,
                            .seq = S});
      expect_near("router dlogits", dlr, dlc, tol(dt));
      expect_near("router dper_expert_scale", der, dec, 1e-6);
      Tensor dr = zeros({T / S, E}, DType::F32), dc = zeros({T / S, E}, DType::F32);
      Tensor lr = zeros({1}, DType::F64), lc = zeros({1}, DType::F64);
      ref.load_balance_forward(
          {.density = dr, .loss = lr, .probs = pr, .idx = ir, .seq = S, .coefficient = 3.0});
      cpu->load_balance_forward(
          {.density = dc, .loss = lc, .probs = pr, .idx = ir, .seq = S, .coefficient = 3.0});
      expect_equal("density", dr, dc);
      EXPECT_NEAR(get_as_double(lc, 0), get_as_double(lr, 0), 1e-12);
    }
}

// Sort, permute, combine and the grouped matmuls of one MoE layer, with an expert that gets
// no rows, through row maps and weight windows.
TEST_P(CpuOps, DispatchAndGroupedMatmuls) {
  const int64_t T = 23, K = 3, E = 6, D = 37, F = 19;
  std::vector<int32_t> choice;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < K; ++j)
      choice.push_back(int32_t((t * 7 + j * 2) % 5));  // expert 5: none
  const Tensor idx = ints(choice).view({T, K});
  Routing r{zeros({T * K}, DType::I32), zeros({T * K}, DType::I32), zeros({T * K}, DType::I32),
            zeros({E}, DType::I32)};
  Routing rc = r;
  for (Tensor* t : {&rc.order, &rc.inverse, &rc.token, &rc.group_sizes}) *t = clone(*t);
  ref.route_sort({.routing = r, .idx = idx, .num_experts = E});
  cpu->route_sort({.routing = rc, .idx = idx, .num_experts = E});
  expect_equal("order", r.order, rc.order);
  expect_equal("group sizes", r.group_sizes, rc.group_sizes);
  ASSERT_EQ(r.group_sizes.data<int32_t>()[5], 0);
  for (DType dt : kDtypes) {
    const std::string d = std::string(dtype_name(dt)) + " ";
    const Tensor x = grid({T, D}, dt), w = grid({T, K}, DType::F32), dm = grid({T, D}, dt);
    Tensor xr = zeros({T * K, D}, dt), xc = zeros({T * K, D}, dt);
    ref.permute({.xs = xr, .x = x, .order = r.order, .k = K});
    cpu->permute({.xs = xc, .x = x, .order = r.order, .k = K});
    expect_equal(d + "permute", xr, xc);
    for (bool token_order : {false, true}) {
      const Tensor y = grid({T * K, D}, dt);
      const Tensor inv = token_order ? Tensor() : r.inverse, ord = token_order ? Tensor() : r.order;
      Tensor mr = zeros({T, D}, dt), mc = zeros({T, D}, dt);
      ref.combine_forward({.m = mr, .y = y, .inverse = inv, .weights = w});
      cpu->combine_forward({.m = mc, .y = y, .inverse = inv, .weights = w});
      expect_near(d + "combine", mr, mc, tol(dt));
      Tensor dyr = zeros({T * K, D}, dt), dyc = zeros({T * K, D}, dt);
      Tensor dwr = zeros({T, K}, DType::F32), dwc = zeros({T, K}, DType::F32);
      ref.combine_backward(
          {.dy = dyr, .dweights = dwr, .dm = dm, .y = y, .order = ord, .weights = w});
      cpu->combine_backward(
          {.dy = dyc, .dweights = dwc, .dm = dm, .y = y, .order = ord, .weights = w});
      expect_near(d + "combine dy", dyr, dyc, tol(dt));
      expect_near(d + "combine dweights", dwr, dwc, 1e-5);
      Tensor pr = grid({T, D}, dt), pc = clone(pr);
      ref.permute_backward({.dx = pr, .dxs = y, .inverse = inv, .k = K, .accumulate = true});
      cpu->permute_backward({.dx = pc, .dxs = y, .inverse = inv, .k = K, .accumulate = true});
      expect_near(d + "permute backward", pr, pc, tol(dt));
    }
    // Grouped matmuls: plain, with the permute and un-permute folded in, on weight halves.
    const Tensor W = grid({E, 2 * F, D}, dt), dh = grid({T * K, 2 * F}, dt);
    const Tensor a = grid({T * K, F}, dt), Wd = grid({E, D, F}, dt),
                 dout_tok = grid({T * K, D}, dt);
    struct Case {
      const char* what;
      GmmRows rows;
    };
    for (const Case& c : {Case{"plain", GmmRows{}}, Case{"gathered", GmmRows{r.token, Tensor()}},
                          Case{"gate half", GmmRows{r.token, Tensor(), 0, F}},
                          Case{"up half accumulating", GmmRows{Tensor(), Tensor(), F, F, true}}}) {
      const bool gather = c.rows.in.defined();
      const Tensor& lhs = gather ? x : xr;
      const int64_t n = c.rows.weight_rows < 0 ? 2 * F : c.rows.weight_rows;
      const Tensor out0 = grid({T * K, n}, dt);
      Tensor outr = clone(out0), outc = clone(out0);
      ref.gmm({.out = outr, .lhs = lhs, .rhs = W, .group_sizes = r.group_sizes, .rows = c.rows});
      cpu->gmm({.out = outc, .lhs = lhs, .rhs = W, .group_sizes = r.group_sizes, .rows = c.rows});
      expect_near(d + "gmm " + c.what, outr, outc, tol(dt));
      const Tensor dgrad = grid({T * K, n}, dt);
      GmmRows back = c.rows;
      back.in = gather ? r.order : Tensor();  // dlhs written in token-copy order
      Tensor dlr = grid({T * K, D}, dt), dlc = clone(dlr);
      ref.gmm_dlhs(
          {.dlhs = dlr, .dout = dgrad, .rhs = W, .group_sizes = r.group_sizes, .rows = back});
      cpu->gmm_dlhs(
          {.dlhs = dlc, .dout = dgrad, .rhs = W, .group_sizes = r.group_sizes, .rows = back});
      expect_near(d + "gmm_dlhs " + c.what, dlr, dlc, tol(dt));
      Tensor dwr = grid({E, 2 * F, D}, DType::F32), dwc = clone(dwr);
      ref.gmm_drhs(
          {.drhs = dwr, .lhs = lhs, .dout = dgrad, .group_sizes = r.group_sizes, .rows = c.rows});
      cpu->gmm_drhs(
          {.drhs = dwc, .lhs = lhs, .dout = dgrad, .group_sizes = r.group_sizes, .rows = c.rows});
      expect_near(d + "gmm_drhs " + c.what, dwr, dwc, 1e-5);
    }
    // The second matmul writing back in token order; its backward reading from there.
    Tensor yr = zeros({T * K, D}, dt), yc = zeros({T * K, D}, dt);
    ref.gmm({.out = yr,
             .lhs = a,
             .rhs = Wd,
             .group_sizes = r.group_sizes,
             .rows = GmmRows{Tensor(), r.order}});
    cpu->gmm({.out = yc,
              .lhs = a,
              .rhs = Wd,
              .group_sizes = r.group_sizes,
              .rows = GmmRows{Tensor(), r.order}});
    expect_near(d + "gmm scattered", yr, yc, tol(dt));
    Tensor dar = zeros({T * K, F}, dt), dac = zeros({T * K, F}, dt);
    ref.gmm_dlhs({.dlhs = dar,
                  .dout = dout_tok,
                  .rhs = Wd,
                  .group_sizes = r.group_sizes,
                  .rows = GmmRows{Tensor(), r.order}});
    cpu->gmm_dlhs({.dlhs = dac,
                   .dout = dout_tok,
                   .rhs = Wd,
                   .group_sizes = r.group_sizes,
                   .rows = GmmRows{Tensor(), r.order}});
    expect_near(d + "gmm_dlhs gathered dout", dar, dac, tol(dt));
    Tensor dwr = zeros({E, D, F}, DType::F32), dwc = zeros({E, D, F}, DType::F32);
    ref.gmm_drhs({.drhs = dwr,
                  .lhs = a,
                  .dout = dout_tok,
                  .group_sizes = r.group_sizes,
                  .rows = GmmRows{Tensor(), r.order}});
    cpu->gmm_drhs({.drhs = dwc,
                   .lhs = a,
                   .dout = dout_tok,
                   .group_sizes = r.group_sizes,
                   .rows = GmmRows{Tensor(), r.order}});
    expect_near(d + "gmm_drhs gathered dout", dwr, dwc, 1e-5);
    for (int64_t i = 5 * D * F; i < 6 * D * F; ++i)
      ASSERT_EQ(get_as_double(dwc, i), 0.0) << "the expert with no rows got a gradient";
  }
}

TEST_P(CpuOps, AttentionForwardAndBackward) {
  // Windows shorter than, equal to and longer than the sequence; two segments in row 1.
  for (int64_t window : {0, 3, 9, 40})
    for (DType dt : kDtypes) {
      const AttentionShape s{2, 9, 4, 2, 6, window};
      const int64_t T = 18;
      const Tensor q = grid({T, 4, 6}, dt, 0.7), k = grid({T, 2, 6}, dt, 0.7),
                   v = grid({T, 2, 6}, dt);
      const Tensor dout = grid({T, 4, 6}, dt);
      const Tensor seg = ints({1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 4, 4, 4, 7, 7, 7, 7, 7});
      Tensor or_ = zeros({T, 4, 6}, dt), oc = zeros({T, 4, 6}, dt);
      Tensor lr = zeros({2, 4, 9}, DType::F32), lc = zeros({2, 4, 9}, DType::F32);
      ref.attention_forward(
          {.o = or_, .lse = lr, .q = q, .k = k, .v = v, .segment_ids = seg, .shape = s});
      cpu->attention_forward(
          {.o = oc, .lse = lc, .q = q, .k = k, .v = v, .segment_ids = seg, .shape = s});
      const std::string what = std::string(dtype_name(dt)) + " window " + std::to_string(window);
      expect_near("attention o " + what, or_, oc, 2 * tol(dt));
      expect_near("attention lse " + what, lr, lc, 1e-5, 1e-5);
      Tensor dqr = zeros({T, 4, 6}, dt), dkr = zeros({T, 2, 6}, dt), dvr = zeros({T, 2, 6}, dt);
      Tensor dqc = zeros({T, 4, 6}, dt), dkc = zeros({T, 2, 6}, dt), dvc = zeros({T, 2, 6}, dt);
      ref.attention_backward({.dq = dqr,
                              .dk = dkr,
                              .dv = dvr,
                              .dout = dout,
                              .q = q,
                              .k = k,
                              .v = v,
                              .o = or_,
                              .lse = lr,
                              .segment_ids = seg,
                              .shape = s});
      cpu->attention_backward({.dq = dqc,
                               .dk = dkc,
                               .dv = dvc,
                               .dout = dout,
                               .q = q,
                               .k = k,
                               .v = v,
                               .o = or_,
                               .lse = lr,
                               .segment_ids = seg,
                               .shape = s});
      expect_near("attention dq " + what, dqr, dqc, 4 * tol(dt));
      expect_near("attention dk " + what, dkr, dkc, 4 * tol(dt));
      expect_near("attention dv " + what, dvr, dvc, 4 * tol(dt));
    }
}

// Many blocks: 300 positions with three documents, 8 query heads over 2 kv heads, windows of
// 100 and none: query blocks that see several key blocks, partly masked blocks, skipped ones.
// Several key blocks, segments and a window, with the default scratch (key panels cached,
// the backward's keys in one chunk) and with scratch too small for that, as long sequences
// run: 360 KiB repacks the backward's panels per use and takes its keys in chunks; 170 KiB
// repacks the forward's (too little for the backward's blocks).
TEST_P(CpuOps, AttentionOverManyBlocks) {
  const int64_t S = 300, T = 2 * S, H = 8, KV = 2, hd = 40;
  std::vector<int32_t> segs;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < S; ++i) segs.push_back(b == 0 ? 1 : (i < 120 ? 1 : (i < 250 ? 2 : 3)));
  const Tensor seg = ints(segs);
  for (const int64_t scratch_kib : {0, 360, 170}) {
    BackendOptions o;
    o.name = "cpu";
    o.num_threads = 2;
    o.isa = GetParam().isa;
    o.attention_scratch_bytes = scratch_kib << 10;
    CpuBackend be(o);
    for (int64_t window : {0, 100}) {
      const DType dt = DType::BF16;
      const AttentionShape s{2, S, H, KV, hd, window};
      const Tensor q = grid({T, H, hd}, dt, 0.3), k = grid({T, KV, hd}, dt, 0.3),
                   v = grid({T, KV, hd}, dt), dout = grid({T, H, hd}, dt);
      Tensor or_ = zeros({T, H, hd}, dt), oc = zeros({T, H, hd}, dt);
      Tensor lr = zeros({2, H, S}, DType::F32), lc = zeros({2, H, S}, DType::F32);
      ref.attention_forward(
          {.o = or_, .lse = lr, .q = q, .k = k, .v = v, .segment_ids = seg, .shape = s});
      be.attention_forward(
          {.o = oc, .lse = lc, .q = q, .k = k, .v = v, .segment_ids = seg, .shape = s});
      const std::string what =
          "window " + std::to_string(window) + ", scratch " + std::to_string(scratch_kib) + " KiB";
      expect_near("attention o " + what, or_, oc, 2 * tol(dt));
      expect_near("attention lse " + what, lr, lc, 1e-5, 1e-5);
      if (scratch_kib == 170) continue;
      Tensor dqr = zeros({T, H, hd}, dt), dkr = zeros({T, KV, hd}, dt),
             dvr = zeros({T, KV, hd}, dt);
      Tensor dqc = zeros({T, H, hd}, dt), dkc = zeros({T, KV, hd}, dt),
             dvc = zeros({T, KV, hd}, dt);
      ref.attention_backward({.dq = dqr,
                              .dk = dkr,
                              .dv = dvr,
                              .dout = dout,
                              .q = q,
                              .k = k,
                              .v = v,
                              .o = or_,
                              .lse = lr,
                              .segment_ids = seg,
                              .shape = s});
      be.attention_backward({.dq = dqc,
                             .dk = dkc,
                             .dv = dvc,
                             .dout = dout,
                             .q = q,
                             .k = k,
                             .v = v,
                             .o = or_,
                             .lse = lr,
                             .segment_ids = seg,
                             .shape = s});
      expect_near("attention dq " + what, dqr, dqc, 4 * tol(dt));
      expect_near("attention dk " + what, dkr, dkc, 4 * tol(dt));
      expect_near("attention dv " + what, dvr, dvc, 4 * tol(dt));
    }
  }
}

TEST_P(CpuOps, SoftcapCrossEntropy) {
  const int64_t C = 5, V = 301;
  const Tensor targets = ints({3, 0, 300, 2, 7}), mask = ints({1, 0, 1, 1, 2});
  for (DType dt : kDtypes)
    for (bool grad : {false, true}) {
      const Tensor z = grid({C, V}, dt, 8.0);
      Tensor zr = clone(z), zc = clone(z);
      Tensor lr = zeros({1}, DType::F64), lc = zeros({1}, DType::F64);
      ref.softcap_cross_entropy({.logits = zr,
                                 .loss = lr,
                                 .targets = targets,
                                 .mask = mask,
                                 .cap = 30.0,
                                 .grad_scale = 0.25,
                                 .write_grad = grad});
      cpu->softcap_cross_entropy({.logits = zc,
                                  .loss = lc,
                                  .targets = targets,
                                  .mask = mask,
                                  .cap = 30.0,
                                  .grad_scale = 0.25,
                                  .write_grad = grad});
      EXPECT_NEAR(get_as_double(lc, 0), get_as_double(lr, 0), 1e-5 * get_as_double(lr, 0));
      expect_near(std::string("softcap ") + (grad ? "dz " : "c ") + std::string(dtype_name(dt)), zr,
                  zc, tol(dt));
    }
}

TEST_P(CpuOps, AdamW) {
  const Tensor p0 = grid({1000}, DType::F32), g = grid({1000}, DType::F32);
  Tensor scalars = zeros({StepScalars::kCount}, DType::F64);
  set_from_double(scalars, StepScalars::kGradSumSq, 4.0);
  const AdamWStep s{0.01, 0.9, 0.95, 1e-8, 0.0, 0.1, 1.0, 3};
  Tensor pr = clone(p0), pc = clone(p0), mr = grid({1000}, DType::F32),
         vr = zeros({1000}, DType::F32);
  cpu->fill({.x = vr, .value = 0.5});
  Tensor mc = clone(mr), vc = clone(vr);
  ref.adamw_step({.param = pr, .grad = g, .m = mr, .v = vr, .step = s, .scalars = scalars});
  cpu->adamw_step({.param = pc, .grad = g, .m = mc, .v = vc, .step = s, .scalars = scalars});
  expect_near("adamw p", pr, pc, 1e-6);
  expect_near("adamw m", mr, mc, 1e-6);
  expect_near("adamw v", vr, vc, 1e-6);
  set_from_double(scalars, StepScalars::kCeSum, NAN);
  Tensor keep = clone(pc);
  cpu->adamw_step({.param = pc, .grad = g, .m = mc, .v = vc, .step = s, .scalars = scalars});
  expect_equal("a step with a NaN loss is not applied", keep, pc);
}

INSTANTIATE_TEST_SUITE_P(Kernels, CpuOps, ::testing::ValuesIn(paths()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace gemmax

namespace gemmax {
namespace {

// The whole model on the cpu backend against the reference: fp32 to fp32 rounding; bf16 within
// the bf16 criterion of bf16_test.cc (its gradient error no larger than 3x the fp32 gradient's
// change under one bf16 rounding of every weight, and below 10%). On the routed MoE, with
// every expert chosen (E = K) and on the dense layer (E = 1), with two sequences of two documents
// each.
class CpuModel : public ::testing::TestWithParam<Path> {};

TEST_P(CpuModel, LossAndGradientsMatchTheReference) {
  for (int64_t experts : {5, 2, 1}) {  // 1: the dense layer (gemma4-31b)
    ModelConfig cfg = testing::small_test_config(2);
    cfg.d_model = 32;
    cfg.vocab_size = 64;
    cfg.num_experts = experts;
    const ParamTable table(cfg);
    ReferenceBackend ref;
    BackendOptions o;
    o.num_threads = 2;
    o.isa = GetParam().isa;
    CpuBackend cpu(o);
    const Batch batch = testing::make_batch(2, 16, cfg.vocab_size, 5, 9);
    auto grads = [&](Backend& be, DType act, const Tensor& w, LossInfo* info) {
      const StepInputs in = upload_batch(be, batch);
      Tensor g = Tensor::zeros({table.total()}, DType::F32);
      *info = Gemma4Model(cfg, be, {act, RematPolicy::Full, 2}).forward_backward(in, w, g);
      return g;
    };
    const Tensor w = testing::trained_like_weights(table, 0.0, 0);
    LossInfo lr, lc, lcb, ln;
    const Tensor gr = grads(ref, DType::F32, w, &lr), gc = grads(cpu, DType::F32, w, &lc);
    EXPECT_NEAR(lc.total_loss, lr.total_loss, 1e-6 * lr.total_loss) << experts;
    EXPECT_LE(testing::relative_l2(gr, gc), 1e-5) << experts << " experts, fp32";
    const Tensor gcb = grads(cpu, DType::BF16, w, &lcb);
    const Tensor gn =
        grads(ref, DType::F32, testing::trained_like_weights(table, std::ldexp(1.0, -9), 11), &ln);
    const double bf16_err = testing::relative_l2(gr, gcb), noise_err = testing::relative_l2(gr, gn);
    EXPECT_NEAR(lcb.total_loss, lr.total_loss, 1e-2 * lr.total_loss) << experts;
    EXPECT_LE(bf16_err, 3 * noise_err) << experts << " experts";
    EXPECT_LE(bf16_err, 0.1) << experts << " experts";
    ::testing::Test::RecordProperty(
        "cpu_bf16_grad_error_" + GetParam().isa + "_E" + std::to_string(experts),
        std::to_string(bf16_err));
  }
}

// Sequences of several key blocks (300 positions: 3 blocks of 128 keys) with a window that
// spans blocks: the whole model's fp32 loss and gradients on the cpu backend against the
// reference.
TEST(CpuModel, LongSequencesMatchTheReference) {
  ModelConfig cfg = testing::small_test_config(2);
  cfg.d_model = 32;
  cfg.vocab_size = 64;
  cfg.sliding_window = 150;
  const ParamTable table(cfg);
  ReferenceBackend ref;
  BackendOptions o;
  o.num_threads = 2;
  CpuBackend cpu(o);
  const Batch batch = testing::make_batch(2, 300, cfg.vocab_size, 5, 170);
  const Tensor w = testing::trained_like_weights(table, 0.0, 0);
  auto grads = [&](Backend& be, LossInfo* info) {
    const StepInputs in = upload_batch(be, batch);
    Tensor g = Tensor::zeros({table.total()}, DType::F32);
    *info = Gemma4Model(cfg, be, {DType::F32, RematPolicy::Full, 2}).forward_backward(in, w, g);
    return g;
  };
  LossInfo lr, lc;
  const Tensor gr = grads(ref, &lr), gc = grads(cpu, &lc);
  EXPECT_NEAR(lc.total_loss, lr.total_loss, 1e-6 * lr.total_loss);
  EXPECT_LE(testing::relative_l2(gr, gc), 1e-5);
}

// With 2 threads the cpu backend's step is the same bit for bit from run to run, and under
// every remat policy (the recompute re-runs the same kernels on the same inputs), with each
// kernel family.
TEST_P(CpuModel, TwoThreadStepsAreBitIdenticalAcrossRunsAndRematPolicies) {
  ModelConfig cfg = testing::small_test_config(2);
  cfg.d_model = 64;
  cfg.vocab_size = 300;
  const ParamTable table(cfg);
  BackendOptions o;
  o.num_threads = 2;
  o.isa = GetParam().isa;
  CpuBackend cpu(o);
  const StepInputs in = upload_batch(cpu, testing::make_batch(2, 64, cfg.vocab_size, 5, 30));
  const Tensor w = testing::trained_like_weights(table, 0.0, 0);
  std::vector<Tensor> grads;
  std::vector<double> losses;
  for (RematPolicy p :
       {RematPolicy::Full, RematPolicy::Full, RematPolicy::None, RematPolicy::Minimal}) {
    grads.push_back(Tensor::zeros({table.total()}, DType::F32));
    losses.push_back(Gemma4Model(cfg, cpu, {DType::BF16, p, 4})
                         .forward_backward(in, w, grads.back())
                         .total_loss);
  }
  for (size_t i = 1; i < grads.size(); ++i) {
    EXPECT_EQ(losses[i], losses[0]) << i;
    EXPECT_EQ(0, std::memcmp(grads[i].raw(), grads[0].raw(), grads[0].nbytes())) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CpuModel, ::testing::ValuesIn(paths()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace gemmax

namespace gemmax {
namespace {

// Without AVX-512 the cpu backend runs its portable kernels and says so in one line; forced
// here by cpu_kernels=avx2. The run trains.
TEST(CpuRun, PortablePathTrainsAndSaysSo) {
  testing::TempDir dir;
  std::string out;
  const std::string cmd = std::string(GEMMAX_BINARY) + " train base_output_directory=" + dir.str() +
                          " run_name=p cpu_kernels=avx2 base_emb_dim=32 max_target_length=32 "
                          "per_device_batch_size=2 steps=3 sample_max_new_tokens=0";
  ASSERT_EQ(testing::run_command(cmd, &out), 0) << out;
  EXPECT_NE(out.find("backend cpu (portable kernels, slower: "), std::string::npos) << out;
  EXPECT_NE(out.find("done: 3 steps"), std::string::npos) << out;
  EXPECT_NE(out.find("forced by cpu_kernels=avx2"), std::string::npos) << out;
  // cpu_isa, the key's former name, still works (older run folders' configs and checkpoints).
  out.clear();
  ASSERT_EQ(testing::run_command(std::string(GEMMAX_BINARY) + " train base_output_directory=" +
                                     dir.str() + " run_name=q cpu_isa=avx2 base_emb_dim=32 " +
                                     "max_target_length=32 per_device_batch_size=2 steps=1 " +
                                     "sample_max_new_tokens=0",
                                 &out),
            0)
      << out;
  EXPECT_NE(out.find("backend cpu (portable kernels, slower: "), std::string::npos) << out;
  out.clear();
  EXPECT_NE(
      testing::run_command(std::string(GEMMAX_BINARY) + " train cpu_kernels=sse9 steps=1", &out),
      0);
  EXPECT_NE(out.find("unknown cpu_kernels 'sse9': expected auto, amx, amx_emulated, avx512_fp32, "
                     "avx512_bf16 or avx2"),
            std::string::npos)
      << out;
}

// A family this CPU cannot run is refused before any step, naming what the CPU lacks and the
// choice that works; auto's choice always runs and says why.
TEST(CpuRun, AKernelThisCpuCannotRunIsAClearError) {
  std::string why;
  EXPECT_TRUE(cpu::isa_runs_here(cpu::choose_isa("auto", &why)));
  EXPECT_EQ(why.rfind("auto: ", 0), 0u) << why;
  int refused = 0;
  for (cpu::Isa isa : {cpu::Isa::Amx, cpu::Isa::Avx512Fp32, cpu::Isa::Avx512Bf16}) {
    if (cpu::isa_runs_here(isa)) continue;
    ++refused;
    const std::string name = cpu::isa_name(isa);
    testing::TempDir dir;
    std::string out;
    EXPECT_NE(testing::run_command(std::string(GEMMAX_BINARY) + " train base_output_directory=" +
                                       dir.str() + " cpu_kernels=" + name + " steps=1",
                                   &out),
              0);
    EXPECT_NE(out.find("cpu_kernels=" + name + ": this CPU ("), std::string::npos) << out;
    EXPECT_NE(out.find("; use cpu_kernels=auto ("), std::string::npos) << out;
    EXPECT_EQ(out.find("step 1"), std::string::npos) << out;
  }
  if (refused == 0) GTEST_SKIP() << "this CPU runs every kernel family";
}

// gemmax bench names the kernel family and why, and prints the machine's limit: the peak of
// every multiply-accumulate instruction this CPU has, measured in the same run, and model
// TFLOP/s as a fraction of the best (figures checked for presence and sense, not speed).
TEST(CpuRun, BenchPrintsTheFamilyAndTheInstructionPeaks) {
  testing::TempDir dir;
  const std::string json = dir.str() + "/bench.json";
  std::string out;
  ASSERT_EQ(testing::run_command(std::string(GEMMAX_BINARY) +
                                     " bench model_name=gemma4-tiny num_threads=2 cpu_kernels=avx2 "
                                     "--warmup 0 --steps 1 --json " +
                                     json,
                                 &out),
            0)
      << out;
  EXPECT_NE(out.find("cpu (portable kernels, slower: forced by cpu_kernels=avx2; 2 threads)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("instruction peaks (register-resident loops, 2 threads at once"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("fp32 FMA ymm (vfmadd231ps, AVX2)"), std::string::npos) << out;
  const auto& f = cpu::cpu_features();
  EXPECT_EQ(out.find("bf16 dot zmm") != std::string::npos, f.avx512_bf16) << out;
  EXPECT_EQ(out.find("fp32 FMA zmm") != std::string::npos, f.avx512) << out;
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(json));
  EXPECT_GT(j["model_over_best_peak"].get<double>(), 0.0);
  EXPECT_LT(j["model_over_best_peak"].get<double>(), 1.0);  // no step beats the instruction
  for (const auto& [name, peak] : j["instruction_peaks"].items())
    EXPECT_GT(peak["tflops"].get<double>(), 0.0) << name;
}

}  // namespace
}  // namespace gemmax
