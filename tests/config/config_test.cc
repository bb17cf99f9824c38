// Configuration: presets, overrides, errors; the parameter registry's counts; FLOPs; schedule.
#include "gemmax/config/config.h"

#include <gtest/gtest.h>

#include <cmath>

#include "gemmax/base/error.h"
#include "gemmax/base/strings.h"
#include "gemmax/config/run_config.h"
#include "gemmax/model/params.h"
#include "gemmax/train/flops.h"
#include "gemmax/train/schedule.h"
#include "test_util.h"

namespace gemmax {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Config, UnknownKeyNamesTheNearestValidOne) {
  const std::string e = error_of([] { Config::defaults({"learning_rat=0.1"}); });
  EXPECT_NE(e.find("unknown config key 'learning_rat'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'learning_rate'"), std::string::npos) << e;
}

// fault_injection, a test key of earlier versions, is in the configs their runs saved: empty, it
// is read and dropped (those runs resume); set, it is an error naming what replaced it.
TEST(Config, TheRetiredFaultKeyOfSavedRunsIsDropped) {
  const Config c = Config::from_json({{"fault_injection", ""}, {"steps", 7}}, "state.json");
  EXPECT_EQ(c.get_int("steps"), 7);
  EXPECT_FALSE(c.has("fault_injection"));
  EXPECT_FALSE(c.to_json().contains("fault_injection"));
  const std::string e = error_of([] { Config::defaults({"fault_injection=1:2:hang"}); });
  EXPECT_NE(e.find("fault_injection is no longer a key"), std::string::npos) << e;
  EXPECT_NE(e.find("gemmax_fault_train"), std::string::npos) << e;
}

TEST(Config, WrongTypeNamesKeyExpectedAndGot) {
  const std::string e = error_of([] { Config::defaults({"steps=ten"}); });
  EXPECT_NE(e.find("'steps' expects int"), std::string::npos) << e;
  EXPECT_NE(e.find("got 'ten'"), std::string::npos) << e;
  EXPECT_NE(error_of([] { Config::defaults({"packing=maybe"}); }).find("expects bool"), std::string::npos);
  EXPECT_NE(error_of([] { Config::defaults({"steps=1.5"}); }).find("expects int"), std::string::npos);
}

TEST(Config, UnknownPresetListsThePresets) {
  const std::string e = error_of([] { Config::defaults({"model_name=gemma5"}); });
  EXPECT_NE(e.find("unknown model_name 'gemma5'"), std::string::npos) << e;
  EXPECT_NE(e.find("gemma4-tiny"), std::string::npos) << e;
}

// Found by fuzz/config_fuzz: a string value that is not UTF-8 was accepted, and writing
// config.yml (or state.json) then failed inside the JSON library. It is refused up front.
TEST(Config, ValueThatIsNotUtf8IsRefused) {
  testing::TempDir dir;
  testing::write_file(dir / "run.yml", "run_name: \"a\xff\tb\"\n");
  testing::expect_error([&] { Config::load(dir / "run.yml", {}); },
                        {"run.yml", "'run_name'", "not valid UTF-8"});
  testing::expect_error([] { Config::defaults({"dataset_path=\xc3("}); },
                        {"command line", "'dataset_path'", "not valid UTF-8"});
  const Config ok = Config::defaults({"run_name=w\xc3\xb6rld-\xf0\x9f\x99\x82"});
  EXPECT_NE(ok.to_yaml().find("w\xc3\xb6rld"), std::string::npos);
}

// Sizes whose products overflow, and NaN or infinite numbers, are refused by the model
// config (found by fuzzing the HF config reader; the YAML config reaches the same check).
TEST(Config, HugeSizesAndNonFiniteNumbersAreRefused) {
  auto model = [](std::vector<std::string> overrides) {
    return [overrides] { ParamTable t(model_config_from(Config::defaults(overrides))); };
  };
  testing::expect_error(model({"base_emb_dim=1099511627776"}), {"base_emb_dim", "above the limit"});
  testing::expect_error(model({"num_experts=16777216", "base_moe_mlp_dim=16777216"}),
                        {"parameters", "more than"});
  testing::expect_error(model({"global_rope_proportion=nan"}), {"rope proportions"});
  testing::expect_error(model({"local_rope_max_timescale=inf"}),
                        {"local_rope_max_timescale", "finite positive"});
}

TEST(Strings, Utf8Validation) {
  for (const char* good :
       {"", "plain", "\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f\x99\x82", "\xf4\x8f\xbf\xbf"})
    EXPECT_TRUE(is_valid_utf8(good)) << good;
  for (const char* bad : {"\xff", "\xc3", "\xc0\xaf" /* overlong */, "\xed\xa0\x80" /* surrogate */,
                          "\xf4\x90\x80\x80" /* above U+10FFFF */, "a\x80", "\xe6\x97"})
    EXPECT_FALSE(is_valid_utf8(bad)) << bad;
}

TEST(Config, PresetFillsModelKeysButUserOverridesWin) {
  const Config c = Config::defaults({"model_name=gemma4-small", "base_num_decoder_layers=2",
                                     "learning_rate=1"});
  EXPECT_EQ(c.get_int("base_emb_dim"), 512);
  EXPECT_EQ(c.get_int("base_num_decoder_layers"), 2);
  EXPECT_EQ(c.get_int("max_target_length"), 1024);
  EXPECT_DOUBLE_EQ(c.get_double("learning_rate"), 1.0);  // an int accepted for a float key
}

TEST(Config, YamlFileThenOverrides) {
  const std::string path = ::testing::TempDir() + "/gemmax_cfg_test.yml";
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs("steps: 7\nrun_name: \"from_file\"\n", f);
  std::fclose(f);
  const Config c = Config::load(path, {"steps=9"});
  EXPECT_EQ(c.get_int("steps"), 9);
  EXPECT_EQ(c.get_string("run_name"), "from_file");
  EXPECT_NE(error_of([] { Config::load("/nonexistent/x.yml", {}); }).find("cannot read"), std::string::npos);
}

TEST(ParamTable, Gemma4_26B_A4B_Counts) {
  const ModelConfig c = model_config_from(Config::defaults({"model_name=gemma4-26b-a4b"}));
  const ParamTable table(c);
  EXPECT_EQ(table.total(), 25233141790);
  EXPECT_EQ(table.active(), 3822530590);
  // No v_proj on the 5 global layers (K = V).
  EXPECT_EQ(table.find("layers.5.self_attn.v_proj.weight"), nullptr);
  EXPECT_NE(table.find("layers.4.self_attn.v_proj.weight"), nullptr);
  EXPECT_EQ(table.at("layers.5.self_attn.q_proj.weight").shape, (Shape{8192, 2816}));
  EXPECT_EQ(table.at("layers.0.experts.gate_up_proj").shape, (Shape{128, 1408, 2816}));
  EXPECT_EQ(table.at("layers.0.experts.down_proj").shape, (Shape{128, 2816, 704}));
}

TEST(Flops, MatchesMaxTextWorkedValues) {
  const ModelConfig c = model_config_from(Config::defaults({"model_name=gemma4-26b-a4b"}));
  const StepFlops f = training_flops(c, 1, 4096);
  EXPECT_NEAR(f.learnable / 1e12 * 3, 93.93, 0.01);
  EXPECT_NEAR(f.attention / 1e12 * 3, 8.63, 0.01);
  EXPECT_NEAR(f.total() / 1e12, 102.56, 0.01);
  EXPECT_NEAR(f.total() / 4096 / 1e9, 25.04, 0.01);
  EXPECT_NEAR(training_flops(c, 1, 2048).total() / 2048 / 1e9, 24.38, 0.01);
}

// A dense model's learnable FLOPs are 2 per token per weight of every matrix it multiplies by
// (the lookup tables aside) plus the tied unembedding: the small members' K/V-sharing layers (no
// k/v projections), double-wide MLPs and per-layer-input matrices included.
TEST(Flops, SmallMembersCountEveryMatrixOnce) {
  for (const char* name : {"gemma4-e2b", "gemma4-e4b", "gemma4-31b"}) {
    const ModelConfig c = model_config_from(Config::defaults({std::string("model_name=") + name}));
    const ParamTable table(c);
    double matrices = 0;
    for (const ParamSpec& s : table.specs())
      if (s.shape.size() == 2 && s.name.rfind("embed_tokens", 0) != 0) matrices += double(s.numel());
    const int64_t T = 4096;
    const StepFlops f = training_flops(c, 1, T);
    EXPECT_NEAR(f.learnable, 2.0 * T * (matrices + double(c.vocab_size * c.d_model)),
                1e-12 * f.learnable)
        << name;
  }
}

TEST(Schedule, WarmupThenCosineToFinalFraction) {
  LrSchedule s{1.0, 100, 0.1, 0.1};
  EXPECT_EQ(s.at(0), 0.0);
  EXPECT_DOUBLE_EQ(s.at(5), 0.5);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(99), 0.1, 1e-12);
  EXPECT_EQ(s.at(100), 0.0);
  EXPECT_NEAR(s.at(10 + 89 / 2.0), 0.55, 0.01);
}

}  // namespace
}  // namespace gemmax
