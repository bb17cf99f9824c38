// LoRA adapters on a frozen base (model/lora/): the forward equals the merged model's, the
// adapters' gradients equal finite differences and the chain rule through the merged model's own
// gradient, every switch and remat policy agrees, no frozen weight gets a gradient, and the cpu
// backend agrees with the reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/base/convert.h"
#include "gemmax/checkpoint/peft_adapter.h"
#include "gemmax/model/gemma4.h"
#include "gemmax/model/lora/lora_params.h"
#include "gemmax/model/lora/nf4_base.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::expect_grad_matches_fd;
using testing::make_batch;
using testing::random_weights;
using testing::relative_l2;

ModelConfig moe_config() { return testing::small_test_config(2); }
ModelConfig dense_config() {
  ModelConfig c = testing::small_test_config(2);
  c.num_experts = 1;
  return c;
}

// A base with adapters on every matrix an adapter can sit on, A and B drawn non-zero (B starts at
// zero in training, which would hide a missing term).
struct LoraCase {
  explicit LoraCase(const ModelConfig& c, LoraShape shape = {2, 3.0, false, 0.0},
                    std::unique_ptr<Backend> backend = std::make_unique<ReferenceBackend>(),
                    DType act = DType::F64)
      : cfg(c),
        be(std::move(backend)),
        table(cfg),
        adapters(table, AdapterTable::candidates(table), shape),
        act(act) {
    base = random_weights(table, 7, act == DType::F64 ? DType::F64 : DType::F32);
    lora = Tensor::empty({adapters.params().total()}, base.dtype());
    Rng rng(21);
    for (int64_t i = 0; i < lora.numel(); ++i) set_from_double(lora, i, 0.3 * rng.normal());
    batch = make_batch(2, 8, cfg.vocab_size, 3, /*split=*/5);
  }

  ModelOptions options(RematPolicy remat = RematPolicy::Full) const {
    ModelOptions o{act, remat, 2};
    return o;
  }
  // The step's losses and the adapters' gradients (host), with these options.
  LossInfo grads(const ModelOptions& o, Tensor* out) {
    Gemma4Model model(cfg, *be, o);
    const Tensor w = be->to_device(base_in_act(), MemKind::Params);
    const Tensor a = be->to_device(lora, MemKind::Params);
    const Tensor g = be->zeros({lora.numel()}, lora.dtype(), MemKind::Grads);
    const Tensor scalars = be->zeros({StepScalars::kCount}, DType::F64, MemKind::Workspace);
    const StepInputs in = upload_batch(*be, batch);
    WholeParams frozen(*be, table, o, w, Tensor());
    LoraParams params(*be, frozen, adapters, o, a, g);
    model.forward_backward(in, params, scalars);
    *out = be->to_host(g);
    return model.losses(be->to_host(scalars), in);
  }
  // The loss of the adapted model, and its final hidden states (host).
  LossInfo forward(const Tensor& adapter_weights, Tensor* x_out = nullptr) {
    Gemma4Model model(cfg, *be, options());
    const Tensor w = be->to_device(base_in_act(), MemKind::Params);
    const Tensor a = be->to_device(adapter_weights, MemKind::Params);
    const Tensor scalars = be->zeros({StepScalars::kCount}, DType::F64, MemKind::Workspace);
    const StepInputs in = upload_batch(*be, batch);
    WholeParams frozen(*be, table, options(), w, Tensor());
    LoraParams params(*be, frozen, adapters, options(), a, Tensor());
    const Tensor x = model.forward_only(in, params, scalars);
    if (x_out) *x_out = be->to_host(x);
    return model.losses(be->to_host(scalars), in);
  }
  // The base with the adapters folded in (PEFT's merge_and_unload).
  Tensor merged() const {
    Tensor m = Tensor::empty(base.shape(), base.dtype());
    std::memcpy(m.raw(), base.raw(), base.nbytes());
    merge_adapters(adapters, lora, m);
    return m;
  }
  // The frozen base is kept in the compute dtype.
  Tensor base_in_act() const {
    if (base.dtype() == act) return base;
    Tensor t = Tensor::empty(base.shape(), act);
    convert_into(base, t);
    return t;
  }

  ModelConfig cfg;
  std::unique_ptr<Backend> be;
  ParamTable table;
  AdapterTable adapters;
  DType act;
  Tensor base, lora;
  Batch batch;
};

class LoraModels : public ::testing::TestWithParam<int> {
 protected:
  ModelConfig config() const {
    switch (GetParam()) {
      case 0:
        return moe_config();
      case 1:
        return dense_config();
      default:
        return testing::small_block_config();
    }
  }
};
INSTANTIATE_TEST_SUITE_P(Blocks, LoraModels, ::testing::Values(0, 1, 2), [](const auto& info) {
  return std::string(info.param == 0 ? "MoE" : info.param == 1 ? "Dense" : "SmallBlock");
});

// y = x W^T + s (x A^T) B^T is x (W + s B A)^T: the adapted model is the merged one.
TEST_P(LoraModels, ForwardEqualsTheMergedModel) {
  for (const bool rslora : {false, true}) {
    LoraCase c(config(), {2, 3.0, rslora, 0.0});
    Tensor x;
    const LossInfo adapted = c.forward(c.lora, &x);
    Gemma4Model model(c.cfg, *c.be, c.options());
    const Tensor merged = c.merged();
    const Tensor scalars = c.be->zeros({StepScalars::kCount}, DType::F64, MemKind::Workspace);
    const StepInputs in = upload_batch(*c.be, c.batch);
    WholeParams whole(*c.be, c.table, c.options(), merged, Tensor());
    const Tensor x_merged = model.forward_only(in, whole, scalars);
    const LossInfo m = model.losses(c.be->to_host(scalars), in);
    EXPECT_NEAR(adapted.total_loss, m.total_loss, 1e-11 * std::abs(m.total_loss));
    EXPECT_LT(relative_l2(x_merged, x), 1e-12) << (rslora ? "rsLoRA" : "LoRA");
    // And the adapters change the model: the base alone gives another loss.
    Tensor zero = Tensor::zeros(c.lora.shape(), c.lora.dtype());
    EXPECT_GT(std::abs(c.forward(zero).total_loss - m.total_loss), 1e-3);
  }
}

TEST_P(LoraModels, AdapterGradientsMatchFiniteDifferences) {
  LoraCase c(config());
  Tensor grads;
  const LossInfo info = c.grads(c.options(RematPolicy::None), &grads);
  auto loss = [&] { return c.forward(c.lora).total_loss; };
  EXPECT_NEAR(loss(), info.total_loss, 1e-12 * std::abs(info.total_loss));
  const ParamTable& t = c.adapters.params();
  for (const ParamSpec& s : t.specs())
    expect_grad_matches_fd(s.name, t.view(c.lora, s.name), t.view(grads, s.name), loss, 3);
}

// The merged model's weight gradient dW (the model's own, tested backward) gives the adapters':
// dA = s B^T dW and dB = s dW A^T, per expert on the experts' weights.
TEST_P(LoraModels, AdapterGradientsAreTheChainRuleOfTheMergedModelsGradient) {
  LoraCase c(config());
  Tensor grads;
  c.grads(c.options(RematPolicy::None), &grads);
  Gemma4Model model(c.cfg, *c.be, c.options(RematPolicy::None));
  Tensor dw = Tensor::zeros({c.table.total()}, DType::F64);
  model.forward_backward(upload_batch(*c.be, c.batch), c.merged(), dw);
  const double s = c.adapters.shape().scale();
  const int64_t r = c.adapters.shape().rank;
  const ParamTable& t = c.adapters.params();
  for (const LoraTarget& target : c.adapters.targets()) {
    const Tensor a = t.view(c.lora, target.a_name), b = t.view(c.lora, target.b_name);
    const Tensor ga = t.view(grads, target.a_name), gb = t.view(grads, target.b_name);
    const Tensor w = c.table.view(dw, target.weight);
    const int64_t out = target.out, in = target.in;
    Tensor want_a = Tensor::zeros(ga.shape(), DType::F64),
           want_b = Tensor::zeros(gb.shape(), DType::F64);
    for (int64_t e = 0; e < target.experts; ++e)
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i) {
          const double d = get_as_double(w, (e * out + o) * in + i);
          for (int64_t j = 0; j < r; ++j) {
            const int64_t ia = (e * r + j) * in + i, ib = (e * out + o) * r + j;
            set_from_double(want_a, ia, get_as_double(want_a, ia) + s * get_as_double(b, ib) * d);
            set_from_double(want_b, ib, get_as_double(want_b, ib) + s * d * get_as_double(a, ia));
          }
        }
    EXPECT_LT(relative_l2(want_a, ga), 1e-10) << target.a_name;
    EXPECT_LT(relative_l2(want_b, gb), 1e-10) << target.b_name;
  }
}

// Each switch of the MoE block and each remat policy computes the same adapters' gradients.
TEST(LoraGradient, SwitchesAndRematPoliciesAgree) {
  LoraCase c(moe_config());
  Tensor want;
  c.grads(c.options(RematPolicy::None), &want);
  for (const RematPolicy remat : {RematPolicy::None, RematPolicy::Minimal, RematPolicy::Full})
    for (const bool fuse : {false, true})
      for (const bool fused_gate_up : {false, true}) {
        ModelOptions o = c.options(remat);
        o.moe_fuse_permute_combine = fuse;
        o.moe_fused_gate_up = fused_gate_up;
        Tensor got;
        c.grads(o, &got);
        EXPECT_LT(relative_l2(want, got), 1e-12)
            << name_of(remat) << " fuse_permute " << fuse << " fused_gate_up " << fused_gate_up;
      }
}

// A backend that forwards every op and refuses a weight gradient of a frozen matrix: in a LoRA
// step every product of the weight-gradient form (trans_a, and every grouped drhs) has the rank r
// as one of its output's sides, and the embedding's gradient is never formed.
class FrozenGuard final : public Backend {
 public:
  explicit FrozenGuard(int64_t rank) : r_(rank) {}
  std::string name() const override { return "frozen guard"; }
  Tensor alloc(const Shape& s, DType d, MemKind k) override { return inner_.alloc(s, d, k); }
  void upload(const Tensor& dst, const Tensor& host) override { inner_.upload(dst, host); }
  Tensor to_host(const Tensor& t) override { return inner_.to_host(t); }
  int64_t weight_gradients = 0;  // of the adapters

 protected:
#define GEMMAX_FORWARD_OP(op, Args, family)               \
  void do_##op(const Args& args, OpDims<Args>) override { \
    check(args);                                          \
    inner_.op(args);                                      \
  }
  GEMMAX_BACKEND_OPS(GEMMAX_FORWARD_OP)
#undef GEMMAX_FORWARD_OP

 private:
  template <class Args>
  void check(const Args&) {}
  void check(const MatmulArgs& a) {
    if (!a.trans_a) return;
    if (a.c.dim(0) != r_ && a.c.dim(1) != r_)
      ADD_FAILURE() << "a frozen matrix's weight gradient: " << a.c.str();
    weight_gradients += 1;
  }
  void check(const GmmDrhsArgs& a) {
    if (a.drhs.dim(1) != r_ && a.drhs.dim(2) != r_)
      ADD_FAILURE() << "a frozen expert weight's gradient: " << a.drhs.str();
    weight_gradients += 1;
  }
  void check(const EmbeddingBackwardArgs&) { ADD_FAILURE() << "the frozen table's gradient"; }

  ReferenceBackend inner_;
  int64_t r_;
};

TEST_P(LoraModels, NoFrozenWeightGetsAGradient) {
  auto guard = std::make_unique<FrozenGuard>(2);
  FrozenGuard* g = guard.get();
  LoraCase c(config(), {2, 3.0, false, 0.0}, std::move(guard));
  Tensor grads;
  c.grads(c.options(), &grads);
  // Each adapter's dA and dB (per_layer_model_projection's dB in one product per layer).
  EXPECT_GE(g->weight_gradients, 2 * int64_t(c.adapters.targets().size()));
}

// PEFT's dropout on an adapter's input: a fixed mask per step (the seed), the same in the
// backward; no dropout without a seed (evaluation).
TEST(LoraDropout, MasksTheAdaptersInputAndItsGradient) {
  LoraCase c(dense_config(), {2, 3.0, false, 0.3});
  Gemma4Model model(c.cfg, *c.be, c.options(RematPolicy::None));
  const StepInputs in = upload_batch(*c.be, c.batch);
  auto run = [&](std::optional<DropoutStep> seed, const Tensor& grads) {
    const Tensor scalars = c.be->zeros({StepScalars::kCount}, DType::F64, MemKind::Workspace);
    WholeParams frozen(*c.be, c.table, c.options(), c.base, Tensor());
    LoraParams params(*c.be, frozen, c.adapters, c.options(), c.lora, grads, seed);
    if (grads.defined())
      model.forward_backward(in, params, scalars);
    else
      model.forward_only(in, params, scalars);
    return model.losses(scalars, in).total_loss;
  };
  const DropoutStep step{42, 0};
  const double eval = run(std::nullopt, Tensor()), dropped = run(step, Tensor());
  EXPECT_NEAR(eval, c.forward(c.lora).total_loss, 1e-12);
  EXPECT_GT(std::abs(dropped - eval), 1e-4) << "the mask changes the adapters' input";
  EXPECT_EQ(dropped, run(step, Tensor())) << "one seed, one mask";
  EXPECT_NE(dropped, run(DropoutStep{42, 7}, Tensor())) << "the mask follows the tokens' place";
  Tensor grads = Tensor::zeros({c.lora.numel()}, DType::F64);
  run(step, grads);
  auto loss = [&] { return run(step, Tensor()); };
  const ParamTable& t = c.adapters.params();
  for (const ParamSpec& s : t.specs())
    expect_grad_matches_fd(s.name, t.view(c.lora, s.name), t.view(grads, s.name), loss, 2);
}

// QLoRA's base computes what its weights quantised and dequantised again compute: the same
// forward and the same adapters' gradients, bit for bit, on every block.
TEST_P(LoraModels, TheNf4BaseComputesWhatItsRoundTripComputes) {
  LoraCase c(config());
  const Tensor round_trip = nf4_round_trip(c.table, c.base, 64, DType::F64);
  EXPECT_GT(relative_l2(c.base, round_trip), 1e-3) << "NF4 changes the weights";
  Gemma4Model model(c.cfg, *c.be, c.options(RematPolicy::None));
  const StepInputs in = upload_batch(*c.be, c.batch);
  auto step = [&](StepParams& base, Tensor* grads) {
    const Tensor scalars = c.be->zeros({StepScalars::kCount}, DType::F64, MemKind::Workspace);
    *grads = Tensor::zeros({c.lora.numel()}, DType::F64);
    LoraParams p(*c.be, base, c.adapters, model.options(), c.lora, *grads);
    model.forward_backward(in, p, scalars);
    return model.losses(scalars, in).total_loss;
  };
  Nf4Base nf4 = alloc_nf4_base(*c.be, c.table, DType::F64, 64);
  upload_nf4_base(*c.be, c.table, nf4, c.base);
  EXPECT_EQ(nf4.codes.nbytes() + nf4.absmax.nbytes(),
            size_t(nf4.layout.code_bytes + 4 * nf4.layout.blocks));
  Nf4Params quantised(*c.be, c.table, model.options(), nf4);
  WholeParams whole(*c.be, c.table, model.options(), round_trip, Tensor());
  Tensor g1, g2;
  EXPECT_EQ(step(quantised, &g1), step(whole, &g2));
  EXPECT_EQ(relative_l2(g2, g1), 0.0);
}

// The cpu backend's LoRA step against the reference's: fp32 against fp64, and bf16 against the
// reference's bf16 (the same roundings; against fp64, bf16's error on these random weights is
// the model's own, without adapters too). The small block's bf16 gradients on them differ from the
// reference's bf16 by 4.5% without adapters already (its per-layer inputs amplify roundings), so
// it is compared in fp32 alone.
TEST_P(LoraModels, CpuBackendMatchesTheReference) {
  for (const DType act : {DType::F32, DType::BF16}) {
    const bool bf = act == DType::BF16;
    if (bf && GetParam() == 2) continue;
    LoraCase ref(config(), {2, 3.0, false, 0.0}, std::make_unique<ReferenceBackend>(),
                 bf ? DType::BF16 : DType::F64);
    Tensor want;
    const LossInfo w = ref.grads(ref.options(), &want);
    LoraCase cpu(config(), {2, 3.0, false, 0.0}, make_backend("cpu"), act);
    Tensor got;
    const LossInfo g = cpu.grads(cpu.options(), &got);
    EXPECT_NEAR(g.total_loss, w.total_loss, (bf ? 1e-2 : 1e-5) * w.total_loss) << dtype_name(act);
    EXPECT_LT(relative_l2(want, got), bf ? 5e-2 : 1e-4) << dtype_name(act);
  }
}

}  // namespace
}  // namespace gemmax
