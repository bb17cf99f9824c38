// MaxText's configuration: the key table's classes, MaxText's files and value forms, model
// names, the bad-input errors, and docs/MAXTEXT.md against the table.
#include <gtest/gtest.h>

#include <set>

#include "gemmax/config/config.h"
#include "gemmax/config/maxtext_keys.h"
#include "gemmax/config/run_config.h"
#include "gemmax/model/params.h"
#include "test_util.h"

namespace gemmax {
namespace {

using testing::expect_error;
using testing::TempDir;
using testing::write_file;

// A stand-in for MaxText's base.yml: MaxText's own defaults (a llama2 model named "default"),
// keys gemmax implements, fixes and ignores, lists and YAML 1.1 number forms.
constexpr char kMaxTextBase[] =
    "run_name: \"\"\n"
    "model_name: \"default\"\n"
    "normalization_layer_epsilon: 1.e-05\n"
    "decoder_block: \"llama2\"\n"
    "mlp_activations: [\"silu\", \"linear\"]\n"
    "base_emb_dim: 2048\n"
    "num_experts: 1\n"
    "shared_experts: 0\n"
    "logits_via_embedding: False\n"
    "use_post_attn_norm: false\n"
    "use_post_ffw_norm: false\n"
    "v_norm_with_scale: true\n"
    "max_num_checkpoints_to_keep: None\n"
    "checkpoint_period: 10_000\n"
    "per_device_batch_size: 12.0\n"
    "steps: 150_001\n"
    "learning_rate_final_fraction: 0.2\n"
    "sparse_matmul: True\n"
    "capacity_factor: -1.0\n"
    "logical_axis_rules: [['activation_batch', ['data', 'fsdp']], ['norm', []]]\n"
    "compile_xla_flags: \"\"\n"
    "image_size_for_vit: [672, 960]\n";

TEST(ConfigMaxText, TableKeysAreUniqueAndImplementedOnesAreGemmaxKeys) {
  const std::vector<std::string> gemmax_keys = Config::defaults().keys();
  const std::set<std::string> gemmax(gemmax_keys.begin(), gemmax_keys.end());
  std::set<std::string_view> seen;
  for (const MaxTextKey& k : maxtext_keys()) {
    EXPECT_TRUE(seen.insert(k.key).second) << "twice in the table: " << k.key;
    EXPECT_EQ(find_maxtext_key(k.key), &k);
    const std::string name(k.key);
    switch (k.cls) {
      case KeyClass::Implemented:
        // Read as itself or as the gemmax key it names.
        EXPECT_TRUE(gemmax.count(k.value.empty() ? name : std::string(k.value))) << name;
        if (!k.value.empty()) EXPECT_FALSE(gemmax.count(name)) << name;
        break;
      case KeyClass::Fixed:
        EXPECT_FALSE(k.value.empty()) << name;
        [[fallthrough]];
      case KeyClass::NoMeaning:
        EXPECT_FALSE(gemmax.count(name)) << name << " is in configs/base.yml: mark it implemented";
        break;
    }
  }
  EXPECT_EQ(find_maxtext_key("backend"), nullptr);  // gemmax's own
  EXPECT_GT(seen.size(), 690u);                     // MaxText 0.2.5 has about 790
}

TEST(ConfigMaxText, FixedKeysAcceptTheirValueAndNameItOtherwise) {
  for (const MaxTextKey& k : maxtext_keys()) {
    if (k.cls != KeyClass::Fixed) continue;
    const std::string key(k.key), value(k.value);
    EXPECT_NO_THROW(Config::defaults({key + "=" + value})) << key;
    const std::string other = canonical_value(value) == "true" ? "false" : "[other]";
    expect_error(
        [&] { Config::defaults({key + "=" + other}); },
        {"command line: key '" + key + "' is " + other, "gemmax has only " + key + "=" + value});
  }
  // The seed workload's keys.
  EXPECT_NO_THROW(
      Config::defaults({"sparse_matmul=true", "megablox=true", "use_iota_embed=false"}));
  expect_error([] { Config::defaults({"megablox=false"}); }, {"'megablox' is false", "grouped"});
}

TEST(ConfigMaxText, NoMeaningKeysTakeAnyValueAndAreListedInOneLine) {
  const Config none = Config::defaults();
  EXPECT_EQ(none.ignored_keys_line(), "");
  const Config c = Config::defaults({"compile_xla_flags=--foo", "enable_jax_profiler=maybe",
                                     "hidden_size_for_vit=[1, 2]", "steps=3"});
  EXPECT_EQ(c.ignored_maxtext_keys(),
            (std::vector<std::string>{"compile_xla_flags", "enable_jax_profiler",
                                      "hidden_size_for_vit"}));
  const std::string line = c.ignored_keys_line();
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_NE(line.find("(3): compile_xla_flags enable_jax_profiler hidden_size_for_vit"),
            std::string::npos)
      << line;
  EXPECT_EQ(c.get_int("steps"), 3);
}

TEST(ConfigMaxText, MaxTextBaseFileIsOverriddenByThePresetAndTheCommandLine) {
  TempDir dir;
  write_file(dir / "base.yml", kMaxTextBase);
  // As MaxText: base.yml, then the model file of model_name, then the command line.
  const Config c = Config::load(dir / "base.yml", {"model_name=gemma4-26b", "head_dim=128"});
  const ModelConfig m = model_config_from(c);
  EXPECT_EQ(m.d_model, 2816);     // the preset over base.yml's 2048
  EXPECT_EQ(m.num_experts, 128);  // and over its dense num_experts: 1
  EXPECT_EQ(m.head_dim, 128);     // the command line over the preset
  EXPECT_EQ(m.norm_eps, 1e-6);    // the preset over base.yml's 1.e-05
  EXPECT_EQ(c.get_int("checkpoint_period"), 10000);
  EXPECT_EQ(c.get_int("per_device_batch_size"), 12);
  EXPECT_EQ(c.get_int("steps"), 150001);
  EXPECT_EQ(c.get_int("max_num_checkpoints_to_keep"), 0);  // MaxText's None: keep all
  EXPECT_EQ(c.get_double("cosine_learning_rate_final_fraction"), 0.2);
  EXPECT_EQ(
      c.ignored_maxtext_keys(),
      (std::vector<std::string>{"compile_xla_flags", "image_size_for_vit", "logical_axis_rules"}));
  // Without a model: MaxText's default model is no Gemma-4.
  expect_error([&] { Config::load(dir / "base.yml", {}); },
               {"model_name 'default' is MaxText's base model", "gemma4-26b"});
}

TEST(ConfigMaxText, GemmaxFileKeepsItsValuesOverThePreset) {
  TempDir dir;
  write_file(dir / "run.yml", "model_name: gemma4-tiny\nbase_emb_dim: 64\n");
  EXPECT_EQ(model_config_from(Config::load(dir / "run.yml", {})).d_model, 64);
}

TEST(ConfigMaxText, ModelFileStandsForItsModelName) {
  TempDir dir;
  std::filesystem::create_directories(dir.path / "models");
  write_file(
      dir / "models/gemma4-26b.yml",
      "base_num_decoder_layers: 30\nbase_emb_dim: 2816\nmlp_activations: [\"gelu\",\"linear\"]\n"
      "decoder_block: \"gemma4\"\nlogits_via_embedding: true\nshared_experts: 1\n"
      "image_size_for_vit: [672, 960]\n");
  const Config c = Config::load(dir / "models/gemma4-26b.yml", {"base_num_decoder_layers=2"});
  EXPECT_EQ(c.get_string("model_name"), "gemma4-26b");
  const ModelConfig m = model_config_from(c);
  EXPECT_EQ(m.num_layers, 2);
  EXPECT_EQ(m.num_experts, 128);
  // The file is gemma4-26b's: another model_name contradicts it.
  expect_error([&] { Config::load(dir / "models/gemma4-26b.yml", {"model_name=gemma4-tiny"}); },
               {"model_name=gemma4-tiny contradicts", "the model file of gemma4-26b"});
  // The small block's model file (gemma4_small) stands for gemma4-e2b.
  write_file(dir / "models/gemma4-e2b.yml",
             "decoder_block: \"gemma4_small\"\nhidden_size_per_layer_input: 256\n"
             "num_kv_shared_layers: 20\nuse_double_wide_mlp: true\n");
  const ModelConfig e2b = model_config_from(Config::load(dir / "models/gemma4-e2b.yml", {}));
  EXPECT_EQ(e2b.name, "gemma4-e2b");
  EXPECT_EQ(e2b.num_kv_shared_layers, 20);
  // A block gemmax does not build, and keys that contradict their block: clear errors.
  expect_error([] { Config::defaults({"decoder_block=llama2"}); },
               {"'decoder_block' is \"llama2\"", "gemma4_small"});
  expect_error([] { model_config_from(Config::defaults({"num_kv_shared_layers=2"})); },
               {"decoder_block \"gemma4\"", "num_kv_shared_layers=2", "decoder_block=gemma4_small"});
  expect_error([] { model_config_from(Config::defaults({"decoder_block=gemma4_small",
                                                        "hidden_size_per_layer_input=8",
                                                        "vocab_size_per_layer_input=259"})); },
               {"hidden_size_per_layer_input 8", "dense layer only"});
}

TEST(ConfigMaxText, MaxTextModelNames) {
  const ModelConfig ours = model_config_from(Config::defaults({"model_name=gemma4-26b-a4b"}));
  const ModelConfig theirs = model_config_from(Config::defaults({"model_name=gemma4-26b"}));
  EXPECT_EQ(ours.shape_difference(theirs), "");
  EXPECT_EQ(theirs.name, "gemma4-26b");
  // The small members: MaxText's sizes, per-layer inputs, shared K/V.
  const ModelConfig e2b = model_config_from(Config::defaults({"model_name=gemma4-e2b"}));
  const ModelConfig e4b = model_config_from(Config::defaults({"model_name=gemma4-e4b"}));
  EXPECT_EQ(ParamTable(e2b).total(), 4628569344 + 35);  // transformers' count + 35 layer_scalars
  EXPECT_EQ(ParamTable(e4b).total(), 7463013376 + 42);  // (a buffer there, a parameter here)
  EXPECT_EQ(e2b.kv_donor(15), 13);  // the last sliding layer before the 20 sharing ones
  EXPECT_EQ(e2b.kv_donor(34), 14);  // the last global one
  EXPECT_EQ(e2b.layer_mlp_dim(15), 2 * 6144);
  EXPECT_EQ(e4b.layer_mlp_dim(41), 10240);
  // MaxText's model files leave global_num_kv_heads at its 0: the global layers' as the sliding.
  EXPECT_EQ(model_config_from(Config::defaults({"model_name=gemma4-e4b", "global_num_kv_heads=0"}))
                .global_num_kv_heads,
            2);
  // The dense member: MaxText's num_experts=1, every layer the MLP alone.
  const ModelConfig dense = model_config_from(Config::defaults({"model_name=gemma4-31b"}));
  EXPECT_FALSE(dense.has_moe());
  EXPECT_EQ(dense.num_layers, 60);
  EXPECT_EQ(dense.d_model, 5376);
  EXPECT_EQ(dense.mlp_dim, 21504);
  EXPECT_EQ(dense.num_global_layers(), 10);
  EXPECT_FALSE(model_config_from(Config::defaults({"num_experts=1"})).has_moe());
  // MaxText's base.yml says shared_experts: 0; a dense model has no MoE layer it could describe.
  EXPECT_NO_THROW(Config::defaults({"model_name=gemma4-31b", "shared_experts=0"}));
  expect_error([] { Config::defaults({"shared_experts=0"}); },
               {"'shared_experts' is 0", "gemmax has only shared_experts=1"});
  EXPECT_EQ(maxtext_model_keys(dense).find("base_moe_mlp_dim"), std::string::npos);
  expect_error([] { Config::defaults({"model_name=gemma4-27b"}); },
               {"unknown model_name 'gemma4-27b'", "gemma4-26b", "gemma4-31b"});
}

TEST(ConfigMaxText, BadInputGivesClearErrors) {
  TempDir dir;
  // Keys that contradict each other: one key, two values.
  write_file(dir / "twice.yml", "steps: 5\nlearning_rate: 1e-3\nsteps: 6\n");
  expect_error([&] { Config::load(dir / "twice.yml", {}); },
               {"twice.yml: key 'steps' is set twice, to 5 and to 6"});
  write_file(dir / "same.yml", "steps: 5\nsteps: 5.0\n");  // even with one value: keep one line
  expect_error([&] { Config::load(dir / "same.yml", {}); },
               {"same.yml: key 'steps' is set twice", "(lines 1 and 2)"});
  // A list where a single value is expected.
  write_file(dir / "list.yml", "steps: [5, 6]\n");
  expect_error([&] { Config::load(dir / "list.yml", {}); },
               {"list.yml: key 'steps' takes a single int value, not a list (got [5,6])"});
  write_file(dir / "map.yml", "learning_rate: {a: 1}\n");
  expect_error([&] { Config::load(dir / "map.yml", {}); }, {"not a mapping"});
  write_file(dir / "empty.yml", "run_name:\n");
  expect_error([&] { Config::load(dir / "empty.yml", {}); },
               {"empty.yml: key 'run_name' has no value; it takes a string"});
  write_file(dir / "keep.yml", "max_num_checkpoints_to_keep: null\n");  // None: keep all
  EXPECT_EQ(Config::load(dir / "keep.yml", {}).get_int("max_num_checkpoints_to_keep"), 0);
  // A value of the wrong type, implemented or fixed.
  expect_error([] { Config::defaults({"per_device_batch_size=12.5"}); }, {"expects int", "12.5"});
  expect_error([] { Config::defaults({"sparse_matmul=maybe"}); }, {"'sparse_matmul' is maybe"});
  EXPECT_NO_THROW(Config::defaults({"sparse_matmul=yes"}));  // YAML 1.1's true, as PyYAML
  expect_error([] { Config::defaults({"max_num_checkpoints_to_keep=many"}); }, {"expects int"});
  expect_error([] { Config::defaults({"steps=None"}); }, {"'steps' expects int"});
}

TEST(ConfigMaxText, SuggestionsAreNearSpellingsOnly) {
  expect_error([] { Config::defaults({"sparse_matmull=true"}); }, {"did you mean 'sparse_matmul'"});
  expect_error([] { Config::defaults({"use_m4_model=false"}); }, {"did you mean 'use_m3_model'"});
  const std::string far = expect_error([] { Config::defaults({"zzzz_qqqq_wwww=1"}); },
                                       {"unknown config key 'zzzz_qqqq_wwww'", "docs/MAXTEXT.md"});
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
  EXPECT_EQ(Config::nearest_key("sparse_matmul_and_more_words"), "");
}

TEST(ConfigMaxText, CanonicalValuesCompareAsMaxTextReadsThem) {
  EXPECT_EQ(canonical_value("True"), canonical_value("true"));
  EXPECT_EQ(canonical_value("10_000"), canonical_value("10000"));
  EXPECT_EQ(canonical_value("1.e-05"), canonical_value("1e-5"));
  EXPECT_EQ(canonical_value("-1.0"), canonical_value("-1"));
  EXPECT_EQ(canonical_value("None"), canonical_value("null"));
  EXPECT_EQ(canonical_value("[\"gelu\", \"linear\"]"), canonical_value("[gelu,linear]"));
  EXPECT_EQ(canonical_value("{b: 1, a: [x]}"), canonical_value("{a: [x], b: 1.0}"));
  EXPECT_NE(canonical_value("[gelu, linear]"), canonical_value("[linear, gelu]"));
  EXPECT_NE(canonical_value("\"1\""), canonical_value("1"));  // a quoted number is a string
  EXPECT_NE(canonical_value("0"), canonical_value("false"));
  EXPECT_EQ(canonical_value("[unclosed"), "\"[unclosed\"");  // not YAML: the text itself
}

}  // namespace
}  // namespace gemmax
