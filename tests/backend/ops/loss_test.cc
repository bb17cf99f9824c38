// Conformance cases (op_conformance.h): the softcapped cross-entropy, whole and split over the
// vocabulary, and AdamW.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "gemmax/base/convert.h"
#include "op_conformance.h"
#include "test_util.h"

namespace gemmax::conformance {

namespace {
// A bfloat16 loss is taken from the capped logits rounded to bfloat16 (the op writes them back):
// each counted row's logsumexp and target logit move by at most 2^-9 of |c| <= cap each.
double capped_rounding(DType dt, double cap, const std::vector<int32_t>& mask) {
  if (dt != DType::BF16 || cap == 0) return 0;
  const auto rows = std::count_if(mask.begin(), mask.end(), [](int32_t m) { return m != 0; });
  return double(rows) * 2 * std::ldexp(cap, -9);
}
// The gradient's softmax is taken of those rounded logits: exp turns their rounding into a
// relative error of each probability (two roundings' worth, against one without the cap).
double capped_tol(DType dt, double cap) {
  return (dt == DType::BF16 && cap > 0 ? 2 : 1) * Harness::tol(dt);
}
}  // namespace

// Masked rows (mask 0 skips, any other value counts), with and without the cap, the loss alone
// and with the gradient.
CONFORMANCE_CASE(SoftcapCrossEntropyLossAndGradient) {
  struct Size {
    int64_t V;
    std::vector<int32_t> targets, mask;
    double grad_scale;
  };
  for (DType dt : h.dtypes())
    for (const Size& z : {Size{1000, {3, 999, 0, 7, 500, 2}, {1, 1, 0, 2, 1, 1}, 0.125},
                          Size{301, {3, 0, 300, 2, 7}, {1, 0, 1, 1, 2}, 0.25}})
      for (double cap : {0.0, 30.0})
        for (bool grad : {false, true}) {
          const int64_t C = int64_t(z.targets.size());
          struct Ops {
            Tensor logits, loss, targets, mask;
          };
          auto [got, truth] = h.run(Ops{h.rand({C, z.V}, dt, 8.0), h.zeros({1}, DType::F64),
                                        h.ints(z.targets), h.ints(z.mask)},
                                    [&](Backend& be, const Ops& t) {
                                      be.softcap_cross_entropy({.logits = t.logits,
                                                                .loss = t.loss,
                                                                .targets = t.targets,
                                                                .mask = t.mask,
                                                                .cap = cap,
                                                                .grad_scale = z.grad_scale,
                                                                .write_grad = grad});
                                    });
          const std::string what = "V=" + std::to_string(z.V) + " cap " + std::to_string(cap) +
                                   (grad ? " gradient" : " capped logits");
          EXPECT_NEAR(get_as_double(got.loss, 0), get_as_double(truth.loss, 0),
                      1e-5 * get_as_double(truth.loss, 0) + capped_rounding(dt, cap, z.mask))
              << what << " " << dtype_name(dt);
          h.expect_near("softcap " + what, got.logits, truth.logits, capped_tol(dt, cap));
        }
}

// The vocabulary split in three column slices, the stats combined on the host between the passes
// as the ranks' all-reduces would; each slice counts some rows of the loss. A backend without the
// passes says which setting avoids them.
CONFORMANCE_CASE(VocabParallelCrossEntropy) {
  const int64_t R = 7, V = 301;
  const std::vector<int64_t> cuts = {0, 100, 101, V};
  const std::vector<int32_t> targets = {3, 0, 300, 100, 150, 7, 101}, mask = {1, 0, 1, 1, 2, 1, 1};
  for (DType dt : h.dtypes()) {
    const Tensor z = h.rand({R, V}, dt, 8.0);
    Tensors in = {h.zeros({1}, DType::F64), h.ints(mask)};
    const size_t slices = cuts.size() - 1;
    for (size_t k = 0; k < slices; ++k) {
      const int64_t w = cuts[k + 1] - cuts[k];
      Tensor part = Tensor::empty({R, w}, dt), local = Tensor::empty({R}, DType::I32);
      for (int64_t r = 0; r < R; ++r) {
        for (int64_t c = 0; c < w; ++c)
          set_from_double(part, r * w + c, get_as_double(z, r * V + cuts[k] + c));
        const int32_t g = targets[size_t(r)];
        local.data<int32_t>()[r] = g >= cuts[k] && g < cuts[k + 1] ? int32_t(g - cuts[k]) : -1;
      }
      in.insert(in.end(), {part, local, h.zeros({3, R}, DType::F64)});
    }
    // The run's tensors are a list (the slices are counted at run time), read through one layout:
    // the loss and the mask, then each slice's logits, targets and stats.
    struct Slice {
      Tensor logits, targets, stats;
    };
    auto loss_of = [](const Tensors& t) { return t[0]; };
    auto mask_of = [](const Tensors& t) { return t[1]; };
    auto slice = [](const Tensors& t, size_t k) {
      return Slice{t[2 + 3 * k], t[3 + 3 * k], t[4 + 3 * k]};
    };
    // Row `row` of every slice's stats becomes the max or the sum over the slices.
    auto combine = [&](Backend& be, const Tensors& t, int row, bool max) {
      std::vector<Tensor> host;  // copies: on a host backend to_host is the tensor itself
      for (size_t k = 0; k < slices; ++k)
        host.push_back(convert_dtype(be.to_host(slice(t, k).stats), DType::F64));
      for (int64_t r = 0; r < R; ++r) {
        double acc = max ? -HUGE_VAL : 0;
        for (const Tensor& s : host) {
          const double x = get_as_double(s, row * R + r);
          acc = max ? std::max(acc, x) : acc + x;
        }
        for (const Tensor& s : host) set_from_double(s, row * R + r, acc);
      }
      for (size_t k = 0; k < slices; ++k) be.upload(slice(t, k).stats, host[k]);
    };
    const OpCalls passes = [&](Backend& be, const Tensors& t) {
      for (size_t k = 0; k < slices; ++k)
        be.vocab_ce_max({.logits = slice(t, k).logits, .stats = slice(t, k).stats, .cap = 30.0});
      combine(be, t, 0, true);
      for (size_t k = 0; k < slices; ++k)
        be.vocab_ce_sums({.logits = slice(t, k).logits,
                          .stats = slice(t, k).stats,
                          .targets = slice(t, k).targets});
      combine(be, t, 1, false);
      combine(be, t, 2, false);
      for (size_t k = 0; k < slices; ++k)
        be.vocab_ce_finish({.logits = slice(t, k).logits,
                            .loss = loss_of(t),
                            .stats = slice(t, k).stats,
                            .targets = slice(t, k).targets,
                            .mask = mask_of(t),
                            .cap = 30.0,
                            .grad_scale = 0.25,
                            .loss_begin = int64_t(k) * 3,
                            .loss_end = std::min<int64_t>(R, int64_t(k + 1) * 3),
                            .write_grad = true});
    };
    Harness::Outputs out;
    try {
      out = h.run(in, passes);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("set fsdp_embedding=gather"), std::string::npos)
          << e.what();
      return;
    }
    EXPECT_NEAR(get_as_double(loss_of(out.got), 0), get_as_double(loss_of(out.truth), 0),
                1e-5 * get_as_double(loss_of(out.truth), 0) + capped_rounding(dt, 30.0, mask))
        << dtype_name(dt);
    for (size_t k = 0; k < slices; ++k)
      h.expect_near("vocab slice " + std::to_string(k) + " gradient", slice(out.got, k).logits,
                    slice(out.truth, k).logits, capped_tol(dt, 30.0));
  }
}

// Sizes and offsets that take a four-at-a-time path, its tail, and the one-at-a-time path of
// operands that are not 16-byte aligned; clipping on and off; a step whose gradient norm or loss
// is not finite leaves the parameters and moments as they were.
CONFORMANCE_CASE(AdamWWithClippingAndTheNonFiniteSkip) {
  for (const auto& [n, offset, slot, value] :
       {std::tuple{int64_t(1000), int64_t(0), StepScalars::kGradSumSq, 0.5},
        std::tuple{int64_t(1000), int64_t(0), StepScalars::kGradSumSq, 400.0},
        std::tuple{int64_t(1000), int64_t(0), StepScalars::kGradSumSq, 4.0},
        std::tuple{int64_t(1003), int64_t(0), StepScalars::kGradSumSq, 400.0},
        std::tuple{int64_t(1003), int64_t(1), StepScalars::kGradSumSq, 400.0},
        std::tuple{int64_t(1000), int64_t(0), StepScalars::kGradSumSq, std::nan("")},
        std::tuple{int64_t(1000), int64_t(0), StepScalars::kCeSum, std::nan("")},
        std::tuple{int64_t(1003), int64_t(1), StepScalars::kLbSum, HUGE_VAL}}) {
    Tensor scalars = h.zeros({StepScalars::kCount}, DType::F64);
    set_from_double(scalars, StepScalars::kGradSumSq, 4.0);
    set_from_double(scalars, slot, value);
    const Tensor p = h.rand({n}), g = h.rand({n}), m = h.rand({n}, DType::F32, 0.1),
                 v = h.zeros({n});
    for (int64_t i = 0; i < n; ++i) set_from_double(v, i, 0.01 * double(i % 7));
    const AdamWStep st{.lr = 1e-2, .weight_decay = 0.1, .clip_norm = 1.0, .t = 3};
    struct Ops {
      Tensor param, grad, m, v, scalars;
    };
    const Ops before{p, g, m, v, scalars};
    auto [got, truth] = h.run(before, [&](Backend& be, const Ops& t) {
      auto part = [&](const Tensor& x) { return x.flat_slice(offset, {n - offset}); };
      be.adamw_step({.param = part(t.param),
                     .grad = part(t.grad),
                     .m = part(t.m),
                     .v = part(t.v),
                     .step = st,
                     .scalars = t.scalars});
    });
    const std::string what = " n=" + std::to_string(n) + " offset=" + std::to_string(offset) +
                             " scalar " + std::to_string(int64_t(slot)) + " = " +
                             std::to_string(value);
    const bool finite = std::isfinite(value);
    for (const auto& [name, field] :
         {std::pair{"param", &Ops::param}, std::pair{"m", &Ops::m}, std::pair{"v", &Ops::v}}) {
      h.expect_near(std::string("adamw ") + name + what, got.*field, truth.*field, 1e-6);
      if (!finite)
        h.expect_exact(std::string("adamw skipped ") + name + what, got.*field, before.*field);
    }
  }
}

}  // namespace gemmax::conformance
