// The model's hand-written backward against finite differences (fp64): one sliding layer, one
// global layer, the whole model; plus routing invariants, masks and remat equivalence.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/model/gemma4.h"
#include "gemmax/model/layer.h"
#include "gemmax/model/weights.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::expect_grad_matches_fd;
using testing::inner;
using testing::make_batch;
using testing::random_tensor;

using testing::random_weights;
using testing::small_block_config;

// experts: 5, the MoE layer; 1, the dense layer of gemma4-31b (no router, no experts).
ModelConfig test_config(int64_t experts) {
  ModelConfig c = testing::small_test_config(2);
  c.num_experts = experts;
  return c;
}


struct Fixture {
  explicit Fixture(int64_t experts = 5) : cfg(test_config(experts)) {}
  explicit Fixture(const ModelConfig& c) : cfg(c) {}
  ModelConfig cfg;
  ReferenceBackend be;
  ParamTable table{cfg};
  Tensor weights = random_weights(table, 7);
  Batch batch = make_batch(2, 8, cfg.vocab_size, 3, /*split=*/5);
  StepInputs in = upload_batch(be, batch);
  Tensor rope_local = rope_table(
      be, in, rope_inv_freq(cfg.head_dim, cfg.local_rope_theta, cfg.local_rope_proportion),
      DType::F64);
  Tensor rope_global = rope_table(
      be, in, rope_inv_freq(cfg.global_head_dim, cfg.global_rope_theta, cfg.global_rope_proportion),
      DType::F64);
  LayerContext ctx{be, cfg, in, ModelOptions{DType::F64}, rope_local, rope_global, 0.01};
};

void check_layer_gradients(int64_t layer, int64_t experts = 5) {
  Fixture f(experts);
  const int64_t T = f.in.tokens_count(), D = f.cfg.d_model;
  Rng rng(11);
  Tensor x = random_tensor({T, D}, rng), r = random_tensor({T, D}, rng);
  Tensor y = Tensor::zeros({T, D}, DType::F64);
  const LayerWeights w = bind_layer(f.table, f.weights, layer);
  // The load-balance loss is part of what the backward differentiates: L = <r, y> + the layer's
  // share of the load-balance loss, which its forward adds into ctx.lb_loss.
  LayerContext ctx = f.ctx;
  ctx.lb_loss = Tensor::zeros({1}, DType::F64);
  auto loss = [&] {
    LayerActs acts;
    f.be.fill({.x = ctx.lb_loss, .value = 0.0});
    layer_forward(ctx, layer, w, x, y, acts);
    return inner(y, r) + get_as_double(ctx.lb_loss, 0);
  };
  Tensor grads = Tensor::zeros({f.table.total()}, DType::F64);
  const LayerWeights g = bind_layer(f.table, grads, layer);
  Tensor dx = Tensor::zeros({T, D}, DType::F64);
  LayerActs acts;
  layer_forward(ctx, layer, w, x, y, acts);
  if (f.cfg.has_moe()) EXPECT_GT(get_as_double(ctx.lb_loss, 0), 0.0);
  layer_backward(ctx, layer, w, g, x, acts, r, dx);

  expect_grad_matches_fd("layer dx", x, dx, loss, 24);
  const std::string p = "layers." + std::to_string(layer) + ".";
  for (const ParamSpec& s : f.table.specs()) {
    if (s.layer != layer) continue;
    expect_grad_matches_fd(s.name, f.table.view(f.weights, s.name), f.table.view(grads, s.name),
                           loss, 6);
  }
}

TEST(LayerGradient, SlidingLayerMatchesFiniteDifferences) {
  ASSERT_FALSE(testing::small_test_config(2).is_global(0));
  check_layer_gradients(0);
}

TEST(LayerGradient, GlobalLayerMatchesFiniteDifferences) {
  const ModelConfig c = testing::small_test_config(2);
  ASSERT_TRUE(c.is_global(1));
  ASSERT_FALSE(c.layer_has_v_proj(1));  // K = V: dWk gets both paths
  check_layer_gradients(1);
}

// The dense layer (gemma4-31b): no router, experts or post_feedforward_layernorm_1.
TEST(LayerGradient, DenseLayersMatchFiniteDifferences) {
  const ParamTable table(test_config(1));
  EXPECT_EQ(table.find("layers.0.router.proj.weight"), nullptr);
  EXPECT_EQ(table.find("layers.0.post_feedforward_layernorm_1.weight"), nullptr);
  EXPECT_NE(table.find("layers.0.post_feedforward_layernorm.weight"), nullptr);
  check_layer_gradients(0, 1);
  check_layer_gradients(1, 1);
}

void check_model_gradients(const ModelConfig& cfg) {
  Fixture f(cfg);
  Gemma4Model model(f.cfg, f.be, {DType::F64, RematPolicy::None, 1});
  Tensor grads = Tensor::zeros({f.table.total()}, DType::F64);
  const LossInfo info = model.forward_backward(f.in, f.weights, grads);
  if (f.cfg.has_moe())
    EXPECT_GT(info.lb_loss, 0.0);
  else
    EXPECT_EQ(info.lb_loss, 0.0);
  EXPECT_NEAR(info.total_loss, info.ce_loss + info.lb_loss, 1e-15);
  auto loss = [&] { return model.forward(f.in, f.weights).total_loss; };
  EXPECT_NEAR(loss(), info.total_loss, 1e-12);
  for (const ParamSpec& s : f.table.specs())
    expect_grad_matches_fd(s.name, f.table.view(f.weights, s.name), f.table.view(grads, s.name),
                           loss, 5);
}

TEST(ModelGradient, WholeModelMatchesFiniteDifferences) { check_model_gradients(test_config(5)); }
TEST(ModelGradient, WholeDenseModelMatchesFiniteDifferences) {
  check_model_gradients(test_config(1));
}
TEST(ModelGradient, SmallBlockModelMatchesFiniteDifferences) {
  check_model_gradients(small_block_config());
}

// The three remat policies give bit-identical losses and gradients: recomputation re-runs the
// same deterministic ops on the same inputs. bf16 runs use fp32 master weights.
class RematThreads : public testing::WithThreads {};

TEST_P(RematThreads, RematPoliciesGiveIdenticalGradients) {
  for (const ModelConfig& cfg : {test_config(5), small_block_config()}) {
  Fixture f(cfg);
  for (DType act : {DType::F64, DType::F32, DType::BF16}) {
    const DType wdt = act == DType::BF16 ? DType::F32 : act;
    Tensor w = Tensor::empty({f.table.total()}, wdt);
    f.be.copy({.dst = w, .src = f.weights});
    std::vector<Tensor> grads;
    std::vector<double> losses;
    for (RematPolicy p : {RematPolicy::None, RematPolicy::Minimal, RematPolicy::Full}) {
      Gemma4Model model(f.cfg, f.be, {act, p, 1});
      grads.push_back(Tensor::zeros({f.table.total()}, wdt));
      losses.push_back(model.forward_backward(f.in, w, grads.back()).total_loss);
    }
    for (size_t i = 1; i < grads.size(); ++i) {
      EXPECT_EQ(losses[0], losses[i]) << dtype_name(act) << " policy " << i;
      EXPECT_EQ(0, std::memcmp(grads[0].raw(), grads[i].raw(), grads[0].nbytes()))
          << dtype_name(act) << " policy " << i;
    }
  }
  }
}

INSTANTIATE_TEST_SUITE_P(ModelGradient, RematThreads, ::testing::Values(1, 2),
                         testing::threads_name);

// What each policy keeps after a layer's forward, and that the backward's recompute fills in
// exactly the rest as workspace.
TEST(ModelGradient, RematPoliciesKeepWhatTheyName) {
  Fixture f;
  const int64_t T = f.in.tokens_count(), D = f.cfg.d_model;
  Rng rng(5);
  Tensor x = random_tensor({T, D}, rng), y = Tensor::zeros({T, D}, DType::F64);
  const LayerWeights w = bind_layer(f.table, f.weights, 0);
  for (RematPolicy p : {RematPolicy::None, RematPolicy::Minimal, RematPolicy::Full}) {
    LayerContext ctx = f.ctx;
    ctx.opt.remat = p;
    LayerActs acts;
    layer_forward(ctx, 0, w, x, y, acts);
    acts.drop_unsaved(p);
    const bool all = p == RematPolicy::None, matmuls = p != RematPolicy::Full;
    EXPECT_EQ(acts.attn.q_raw.defined(), matmuls);
    EXPECT_EQ(acts.attn.proj.defined(), matmuls);
    EXPECT_EQ(acts.mlp.gate_up.defined(), matmuls);
    EXPECT_EQ(acts.moe.logits.defined(), matmuls);
    EXPECT_EQ(acts.moe.gate_up.defined(), matmuls);
    EXPECT_EQ(acts.moe.y.defined(), matmuls);
    EXPECT_EQ(acts.attn.attn.defined(), all);
    EXPECT_EQ(acts.moe.combined.defined(), all);
    EXPECT_EQ(acts.h().defined(), all);
    if (matmuls) EXPECT_EQ(acts.moe.y.mem_kind(), MemKind::Activations);
    // The recompute fills in the rest, as workspace, without touching what was kept.
    const Tensor kept_y = acts.moe.y;
    LayerContext re = ctx;
    re.recompute = true;
    layer_forward(re, 0, w, x, Tensor(), acts);
    EXPECT_TRUE(acts.attn.attn.defined() && acts.moe.combined.defined() && acts.h().defined());
    if (!all) EXPECT_EQ(acts.moe.combined.mem_kind(), MemKind::Workspace);
    if (matmuls) EXPECT_EQ(acts.moe.y.raw(), kept_y.raw()) << "a kept tensor was recomputed";
  }
}

// Whatever fields the blocks have, a layer's forward leaves alive only what the remat policy
// keeps: after drop_unsaved() none of the layer's workspace is alive (but the donors' K/V, which
// the sharing layers read until the step's end) and no activation it kept was released. The
// tracker counts every live allocation by kind, so a field the policy does not keep that the
// drop misses shows as live workspace, and one dropped although kept as released activations.
TEST(ModelGradient, OnlyWhatTheRematPolicyKeepsOutlivesALayer) {
  for (const ModelConfig& cfg : {test_config(5), test_config(1), small_block_config()}) {
    Fixture f(cfg);
    const int64_t T = f.in.tokens_count(), D = cfg.d_model, L = cfg.num_layers;
    Rng rng(5);
    Tensor x = random_tensor({T, D}, rng), y = Tensor::zeros({T, D}, DType::F64);
    const MemoryTracker& mem = f.be.tracker();
    auto live = [&](MemKind k) { return int64_t(mem.current(k)); };
    for (RematPolicy p : {RematPolicy::None, RematPolicy::Minimal, RematPolicy::Full}) {
      LayerContext ctx = f.ctx;
      ctx.opt.remat = p;
      DonorKv kv(L);
      if (cfg.num_kv_shared_layers > 0) ctx.donor_kv = &kv;
      if (cfg.has_per_layer_inputs())
        ctx.per_layer_inputs = random_tensor({L, T, cfg.per_layer_input_dim}, rng);
      std::vector<LayerActs> acts(static_cast<size_t>(L));
      for (int64_t l = 0; l < L; ++l) {
        const std::string where = std::string(name_of(p)) + ", " +
                                  (cfg.has_per_layer_inputs() ? "small block"
                                   : cfg.has_moe()            ? "MoE"
                                                              : "dense") +
                                  ", layer " + std::to_string(l);
        const int64_t work0 = live(MemKind::Workspace), kept0 = live(MemKind::Activations);
        layer_forward(ctx, l, bind_layer(f.table, f.weights, l), x, y, acts[size_t(l)]);
        const int64_t kept = live(MemKind::Activations);
        acts[size_t(l)].drop_unsaved(p);
        int64_t donor = 0;
        for (const Tensor& t : {kv.k[size_t(l)], kv.v[size_t(l)]})
          if (t.defined() && t.mem_kind() == MemKind::Workspace) donor += int64_t(t.nbytes());
        EXPECT_EQ(live(MemKind::Workspace) - work0, donor) << where << ": workspace outlives it";
        EXPECT_EQ(live(MemKind::Activations), kept) << where << ": a kept activation was released";
        if (p == RematPolicy::Full) EXPECT_EQ(kept, kept0) << where << ": full keeps nothing";
        if (p == RematPolicy::None) EXPECT_GT(kept, kept0) << where;
      }
    }
  }
}

// load_balance_density=per_choice (MaxText 0.2.5's density, divided by num_experts_per_tok):
// the load-balance term is 1/K of per_token's with the cross-entropy unchanged, and every
// gradient moves by 1/K of the term's own gradient (per_token's backward is checked against
// finite differences above). The weight is raised so that the term's share of the gradients is
// far above rounding.
TEST(ModelGradient, PerChoiceDensityIsOneKthOfTheTerm) {
  ModelConfig c = test_config(5);
  c.load_balance_loss_weight = 0.5;
  struct Run {
    LossInfo info;
    Tensor grads;
  };
  auto run = [](const ModelConfig& cfg) {
    Fixture f(cfg);
    Gemma4Model model(f.cfg, f.be, {DType::F64, RematPolicy::None, 1});
    Tensor grads = Tensor::zeros({f.table.total()}, DType::F64);
    const LossInfo info = model.forward_backward(f.in, f.weights, grads);
    return Run{info, grads};
  };
  ModelConfig no_lb = c, choice = c;
  no_lb.load_balance_loss_weight = 0;
  choice.load_balance_density = LoadBalanceDensity::PerChoice;
  const Run t = run(c), n = run(no_lb), k = run(choice);
  const double K = double(c.num_experts_per_tok);
  ASSERT_GT(t.info.lb_loss, 0.0);
  EXPECT_EQ(k.info.ce_loss, t.info.ce_loss);
  EXPECT_NEAR(k.info.lb_loss, t.info.lb_loss / K, 1e-15 * t.info.lb_loss);
  Tensor expected = Tensor::empty(t.grads.shape(), DType::F64);
  for (int64_t i = 0; i < t.grads.numel(); ++i) {
    const double ce = get_as_double(n.grads, i);
    set_from_double(expected, i, ce + (get_as_double(t.grads, i) - ce) / K);
  }
  EXPECT_GT(testing::relative_l2(n.grads, t.grads), 1e-3);  // the term's gradient is visible
  EXPECT_LT(testing::relative_l2(expected, k.grads), 1e-13);
}

TEST(ModelGradient, ExpertWithNoTokensGetsZeroGradient) {
  Fixture f;
  // router.scale = 0 makes every router logit 0: the tie rule then sends every token of layer 0
  // to experts 0 and 1, and experts 2.. get no rows.
  f.be.fill({.x = f.table.view(f.weights, "layers.0.router.scale"), .value = 0.0});
  Gemma4Model model(f.cfg, f.be, {DType::F64, RematPolicy::None, 1});
  Tensor grads = Tensor::zeros({f.table.total()}, DType::F64);
  f.be.fill({.x = grads, .value = 0.0});
  model.forward_backward(f.in, f.weights, grads);
  for (const char* name : {"layers.0.experts.gate_up_proj", "layers.0.experts.down_proj"}) {
    const Tensor g = f.table.view(grads, name);
    const int64_t per_expert = g.numel() / f.cfg.num_experts;
    for (int64_t e = 0; e < f.cfg.num_experts; ++e) {
      double norm = 0;
      for (int64_t i = 0; i < per_expert; ++i)
        norm += std::abs(get_as_double(g, e * per_expert + i));
      if (e < f.cfg.num_experts_per_tok)
        EXPECT_GT(norm, 0.0) << name << " expert " << e;
      else
        EXPECT_EQ(norm, 0.0) << name << " expert " << e;
    }
  }
}

// Routing invariants on a real layer's forward.
TEST(Routing, GroupSizesSumToTokensTimesTopKAndOrderIsStable) {
  Fixture f;
  const int64_t T = f.in.tokens_count(), K = f.cfg.num_experts_per_tok, E = f.cfg.num_experts;
  Rng rng(5);
  Tensor x = random_tensor({T, f.cfg.d_model}, rng),
         y = Tensor::zeros({T, f.cfg.d_model}, DType::F64);
  LayerActs acts;
  layer_forward(f.ctx, 0, bind_layer(f.table, f.weights, 0), x, y, acts);
  const Routing& r = acts.moe.routing;
  int64_t sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += r.group_sizes.data<int32_t>()[e];
  EXPECT_EQ(sum, T * K);
  const int32_t* idx = acts.moe.idx.data<int32_t>();
  const int32_t* order = r.order.data<int32_t>();
  int64_t row = 0;
  for (int64_t e = 0; e < E; ++e) {
    int32_t prev = -1;
    for (int32_t n = 0; n < r.group_sizes.data<int32_t>()[e]; ++n, ++row) {
      EXPECT_EQ(idx[order[row]], e) << "row " << row << " is in expert " << e << "'s group";
      EXPECT_GT(order[row], prev) << "token order within expert " << e << " is not stable";
      prev = order[row];
    }
  }
}

// Masks: what a layer's output at position i may depend on.
class Masks : public ::testing::Test {
 protected:
  Fixture f;
  Tensor out(int64_t layer, const Tensor& x) {
    Tensor y = Tensor::zeros(x.shape(), DType::F64);
    LayerActs acts;
    layer_forward(f.ctx, layer, bind_layer(f.table, f.weights, layer), x, y, acts);
    return y;
  }
  double row_change(int64_t layer, int64_t changed, int64_t observed, uint64_t seed = 9) {
    Rng rng(seed);
    const int64_t D = f.cfg.d_model;
    Tensor x = random_tensor({f.in.tokens_count(), D}, rng);
    Tensor y0 = out(layer, x);
    for (int64_t i = 0; i < D; ++i) set_from_double(x, changed * D + i, rng.normal());
    Tensor y1 = out(layer, x);
    double diff = 0;
    for (int64_t i = 0; i < D; ++i)
      diff = std::max(diff, std::abs(get_as_double(y0, observed * D + i) -
                                     get_as_double(y1, observed * D + i)));
    return diff;
  }
};

TEST_F(Masks, SlidingWindowHidesOldTokensGlobalDoesNot) {
  // Row 0 holds one document of 5 tokens (positions 0-4) then another; window 3.
  const int64_t W = f.cfg.sliding_window, i = 4;
  EXPECT_EQ(row_change(0, i - W, i), 0.0) << "sliding layer sees token i - window";
  EXPECT_EQ(row_change(0, 0, i), 0.0);
  EXPECT_GT(row_change(0, i - W + 1, i), 1e-6) << "sliding layer ignores token i - window + 1";
  EXPECT_GT(row_change(1, i - W, i), 1e-6) << "global layer ignores token i - window";
  EXPECT_GT(row_change(1, 0, i), 1e-6);
}

TEST_F(Masks, NothingCrossesASegmentBoundary) {
  // In row 0, tokens 0-4 are segment 1 and 5-7 segment 2.
  for (int64_t layer : {0, 1}) {
    EXPECT_EQ(row_change(layer, 4, 5), 0.0) << "layer " << layer;
    EXPECT_EQ(row_change(layer, 3, 7), 0.0) << "layer " << layer;
    EXPECT_EQ(row_change(layer, 6, 4), 0.0) << "layer " << layer << " (future token)";
    EXPECT_GT(row_change(layer, 5, 7), 1e-6) << "layer " << layer;
  }
}

}  // namespace
}  // namespace gemmax
