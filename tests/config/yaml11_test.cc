// Values as MaxText's PyYAML reads them (YAML 1.1): octal, hexadecimal and binary integers, the
// yes/no/on/off booleans, and the key combinations validate refuses.
#include <gtest/gtest.h>

#include "gemmax/config/config.h"
#include "gemmax/config/maxtext_keys.h"
#include "gemmax/config/validate.h"
#include "test_util.h"

namespace gemmax {
namespace {

TEST(ConfigYaml11, IntegersAsPyYamlResolvesThem) {
  const std::vector<std::pair<std::string, int64_t>> cases = {
      {"010", 8}, {"0x10", 16}, {"0b101", 5}, {"10_000", 10000}, {"-010", -8}, {"0", 0}, {"+7", 7}};
  for (const auto& [text, want] : cases) {
    int64_t got = -99;
    EXPECT_TRUE(parse_yaml_int(text, got)) << text;
    EXPECT_EQ(got, want) << text;
  }
  for (const char* bad : {"", "0x", "_1", "1.5", "08", "1e3", "0x_f"}) {
    int64_t got;
    EXPECT_FALSE(parse_yaml_int(bad, got)) << bad;
  }
  testing::TempDir dir;
  testing::write_file(dir / "octal.yml", "steps: 010\nlog_period: 0x10\n");
  const Config c = Config::load(dir / "octal.yml", {"checkpoint_period=011"});
  EXPECT_EQ(c.get_int("steps"), 8);
  EXPECT_EQ(c.get_int("log_period"), 16);
  EXPECT_EQ(c.get_int("checkpoint_period"), 9);
  EXPECT_EQ(Config::defaults({"peak_tflops_per_device=010"}).get_double("peak_tflops_per_device"), 8.0);
}

TEST(ConfigYaml11, BooleansAsPyYamlResolvesThem) {
  for (const char* t : {"yes", "Yes", "YES", "on", "On", "ON", "true", "True"})
    EXPECT_TRUE(Config::defaults({std::string("packing=") + t}).get_bool("packing")) << t;
  for (const char* f : {"no", "No", "NO", "off", "Off", "OFF", "false", "FALSE"})
    EXPECT_FALSE(Config::defaults({std::string("packing=") + f}).get_bool("packing")) << f;
  testing::expect_error([] { Config::defaults({"packing=y"}); }, {"packing", "expects bool"});
  EXPECT_EQ(canonical_value("yes"), canonical_value("true"));
  EXPECT_EQ(canonical_value("off"), canonical_value("False"));
  EXPECT_EQ(canonical_value("010"), canonical_value("8"));
  EXPECT_NE(canonical_value("010"), canonical_value("10"));
}

TEST(ConfigYaml11, EvaluationKeysOutsideTheirRangesOrWithoutAnEvaluationAreRefused) {
  for (const char* kv : {"eval_interval=-2", "eval_interval=0", "eval_steps=-2", "eval_steps=0",
                         "target_eval_loss=-0.5"})
    testing::expect_error([&] { validate_run_config(Config::defaults({kv})); },
                          {std::string(kv), "outside its valid range"});
  EXPECT_NO_THROW(validate_run_config(Config::defaults({"eval_interval=-1", "eval_steps=-1"})));
  testing::expect_error(
      [] { validate_run_config(Config::defaults({"eval_interval=-1", "target_eval_loss=2"})); },
      {"target_eval_loss=2", "eval_interval=-1 evaluates nothing"});
}

}  // namespace
}  // namespace gemmax
