// Initialisation from scratch (docs/MODEL.md §4.9): the moments of the drawn weights per kind of
// parameter under init_scheme=maxtext, init_scheme=hf bit for bit as before the key existed,
// pieces equal to the whole, the keys' errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "gemmax/base/rng.h"
#include "gemmax/config/config.h"
#include "gemmax/config/run_config.h"
#include "gemmax/model/params.h"
#include "test_util.h"

namespace gemmax {
namespace {

ModelConfig config_of(const std::vector<std::string>& overrides) {
  return model_config_from(Config::defaults(overrides));
}

// gemma4-tiny with 32 experts: its smallest matrix (the router, 32 x 128) still tells a
// truncated normal's kurtosis (2.37) from a normal's (3) by more than 4 standard errors.
std::vector<std::string> moments_model(std::vector<std::string> more) {
  more.insert(more.begin(), {"model_name=gemma4-tiny", "num_experts=32"});
  return more;
}

Tensor initial_weights(const ParamTable& table, uint64_t seed) {
  Tensor w = Tensor::zeros({table.total()}, DType::F32);
  init_params(table, w, seed);
  return w;
}

uint64_t fnv1a(const Tensor& t) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

struct Moments {
  double mean = 0, std = 0, kurtosis = 0, max_abs = 0, min = 0, max = 0;
  int64_t n = 0;
};

Moments moments_of(const Tensor& t) {
  Moments m;
  m.n = t.numel();
  double s1 = 0, s2 = 0, s4 = 0;
  m.min = m.max = get_as_double(t, 0);
  for (int64_t i = 0; i < m.n; ++i) s1 += get_as_double(t, i);
  m.mean = s1 / double(m.n);
  for (int64_t i = 0; i < m.n; ++i) {
    const double v = get_as_double(t, i), d = v - m.mean;
    s2 += d * d;
    s4 += d * d * d * d;
    m.max_abs = std::max(m.max_abs, std::fabs(v));
    m.min = std::min(m.min, v);
    m.max = std::max(m.max, v);
  }
  const double var = s2 / double(m.n);
  m.std = std::sqrt(var);
  m.kurtosis = s4 / double(m.n) / (var * var);
  return m;
}

// The expected distribution of each parameter, written out from MaxText's
// initializers (layers/attentions.py, moe.py, linears.py, models/models.py), independently of
// init_distribution: {std, truncated}.
InitDistribution maxtext_expected(const ModelConfig& c, const std::string& name, double scale) {
  const double D = double(c.d_model), H = double(c.num_heads), E = double(c.num_experts);
  const double F = double(c.moe_mlp_dim), Fs = double(c.mlp_dim);
  const int64_t layer = name.rfind("layers.", 0) == 0 ? std::stoll(name.substr(7)) : -1;
  const double hd = layer >= 0 ? double(c.layer_head_dim(layer)) : 0;
  auto has = [&](const char* part) { return name.find(part) != std::string::npos; };
  if (name == "embed_tokens.weight") return {1.0 / std::sqrt(D), false};
  if (has("q_proj")) return {1.0 / std::sqrt(D) / std::sqrt(hd), false};
  if (has("k_proj") || has("v_proj")) return {1.0 / std::sqrt(D), false};
  if (has("o_proj")) return {1.0 / std::sqrt(H * hd), false};
  if (has("mlp.gate_proj") || has("mlp.up_proj") || has("router.proj"))
    return {std::sqrt(scale / D), true};
  if (has("mlp.down_proj")) return {std::sqrt(scale / Fs), true};
  if (has("experts.gate_up_proj")) return {std::sqrt(scale / (E * F)), true};
  if (has("experts.down_proj")) return {std::sqrt(scale / (E * D)), true};
  ADD_FAILURE() << "no expectation for " << name;
  return {};
}

constexpr double kTruncatedKurtosis = 2.3655;  // of N(0, 1) cut to [-2, 2]
constexpr double kTruncatedStd = 0.87962566103423978;

void check_maxtext_moments(double dense_init_scale) {
  const ModelConfig c = config_of(moments_model(
      {"init_scheme=maxtext", "dense_init_scale=" + std::to_string(dense_init_scale)}));
  const ParamTable table(c);
  const Tensor w = initial_weights(table, 3);
  int kinds_seen = 0;
  int64_t first_global = 0;
  while (!c.is_global(first_global)) ++first_global;
  for (const ParamSpec& s : table.specs()) {
    const Moments m = moments_of(table.view(w, s.name));
    SCOPED_TRACE(s.name + " (" + std::to_string(m.n) + " values)");
    if (s.init == ParamInit::Ones) {
      EXPECT_EQ(m.min, 1.0);
      EXPECT_EQ(m.max, 1.0);
      continue;
    }
    const InitDistribution want = maxtext_expected(c, s.name, dense_init_scale);
    if (s.layer > 0 && s.layer != first_global) continue;  // a sliding and a global layer
    ++kinds_seen;
    // Sampling errors: the mean's is std/√n, the std's about std/√(2n), the kurtosis's √(24/n).
    const double n = double(m.n);
    EXPECT_NEAR(m.mean, 0.0, 5 * want.std / std::sqrt(n));
    EXPECT_NEAR(m.std / want.std, 1.0, 5 / std::sqrt(2 * n));
    if (want.truncated) {
      EXPECT_NEAR(m.kurtosis, kTruncatedKurtosis, 4 * std::sqrt(24 / n));
      EXPECT_LE(m.max_abs, 2 * want.std / kTruncatedStd * (1 + 1e-6));
      EXPECT_GT(m.max_abs, 1.9 * want.std / kTruncatedStd);  // the cut is reached
    } else {
      EXPECT_NEAR(m.kurtosis, 3.0, 4 * std::sqrt(24 / n));
      EXPECT_GT(m.max_abs, 3 * want.std);                   // tails beyond the cut exist
    }
  }
  EXPECT_EQ(kinds_seen, 1 + 10 + 9);  // the embedding; 10 matrices in a sliding layer, 9 global
}

TEST(Init, MaxTextSchemeMomentsPerParameterKind) { check_maxtext_moments(1.0); }

TEST(Init, DenseInitScaleScalesOnlyTheMoeBlocksVariance) { check_maxtext_moments(3.0); }

TEST(Init, MaxTextIsTheDefaultScheme) {
  EXPECT_EQ(config_of({}).init_scheme, InitScheme::MaxText);
  const ParamTable a(config_of({"model_name=gemma4-tiny"}));
  const ParamTable b(config_of({"model_name=gemma4-tiny", "init_scheme=maxtext"}));
  EXPECT_EQ(fnv1a(initial_weights(a, 0)), fnv1a(initial_weights(b, 0)));
}

TEST(Init, HfSchemeMomentsAreInitializerRange) {
  const ModelConfig c = config_of(moments_model({"init_scheme=hf", "initializer_range=0.05"}));
  const ParamTable table(c);
  const Tensor w = initial_weights(table, 1);
  for (const char* name : {"embed_tokens.weight", "layers.0.self_attn.q_proj.weight",
                           "layers.0.experts.gate_up_proj", "layers.0.router.proj.weight"}) {
    SCOPED_TRACE(name);
    const Moments m = moments_of(table.view(w, name));
    EXPECT_NEAR(m.std / 0.05, 1.0, 5 / std::sqrt(2.0 * double(m.n)));
    EXPECT_NEAR(m.kurtosis, 3.0, 4 * std::sqrt(24.0 / double(m.n)));
  }
}

// The hashes of the fp32 weights gemmax drew before init_scheme existed (every matrix from
// N(0, 0.02²), each parameter from its own stream), taken from that build.
TEST(Init, HfSchemeReproducesTheWeightsOfBefore) {
  struct Golden {
    const char* model;
    uint64_t seed, hash;
  };
  for (const Golden& g : {Golden{"gemma4-tiny", 0, 0xa192c813d41ae41cull},
                          Golden{"gemma4-tiny", 7, 0xc62d6a642d211305ull}}) {
    const ParamTable table(config_of({std::string("model_name=") + g.model, "init_scheme=hf"}));
    EXPECT_EQ(fnv1a(initial_weights(table, g.seed)), g.hash) << g.model << " seed " << g.seed;
  }
}

// FSDP ranks generate their own pieces (init_param_range from an offset): equal to the whole.
TEST(Init, PiecesEqualTheWholeInBothSchemes) {
  for (const char* scheme : {"maxtext", "hf"}) {
    const ParamTable table(config_of({"model_name=gemma4-tiny", std::string("init_scheme=") + scheme}));
    const Tensor whole = initial_weights(table, 5);
    for (const ParamSpec& s : table.specs()) {
      const int64_t begin = s.numel() / 3, count = s.numel() - begin - s.numel() / 5;
      Tensor piece = Tensor::zeros({count}, DType::F32);
      init_param_range(table, s, begin, piece, 5);
      const Tensor expect = whole.flat_slice(s.offset + begin, {count});
      for (int64_t j = 0; j < count; ++j)
        ASSERT_EQ(get_as_double(piece, j), get_as_double(expect, j)) << scheme << " " << s.name;
    }
  }
}

TEST(Init, TruncatedNormalStaysInsideTheCutAndMatchesItsMoments) {
  Rng rng(9);
  const int64_t n = 400000;
  double s2 = 0, s4 = 0, lo = 0, hi = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = rng.truncated_normal();
    s2 += x * x, s4 += x * x * x * x;
    lo = std::min(lo, x), hi = std::max(hi, x);
  }
  EXPECT_GE(lo, -2.0);
  EXPECT_LE(hi, 2.0);
  EXPECT_LT(lo, -1.99);
  EXPECT_GT(hi, 1.99);
  EXPECT_NEAR(std::sqrt(s2 / double(n)), kTruncatedStd, 0.003);
  EXPECT_NEAR(s4 / double(n) / (s2 / double(n) * s2 / double(n)), kTruncatedKurtosis, 0.02);
}

TEST(Init, BadKeysAreNamed) {
  testing::expect_error([] { config_of({"init_scheme=xavier"}); },
                        {"init_scheme='xavier'", "maxtext", "hf"});
  testing::expect_error([] { config_of({"dense_init_scale=0"}); },
                        {"dense_init_scale", "positive"});
}

}  // namespace
}  // namespace gemmax
