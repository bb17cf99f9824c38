// The key table (config/keys.h): every key's default, type, range and choices are what a run
// reads, each range refuses what lies outside it, and the generated files match the table.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "gemmax/config/key_table.h"
#include "gemmax/config/maxtext_keys.h"
#include "gemmax/config/run_config.h"
#include "gemmax/config/train_config.h"
#include "gemmax/config/validate.h"
#include "test_util.h"

namespace gemmax {
namespace {

TEST(KeyTable, DefaultsAreWhatARunReads) {
  const Config c = Config::defaults({"model_name=gemma4-tiny"});
  std::set<std::string_view> keys;
  for (const KeySpec& k : key_specs()) {
    EXPECT_TRUE(keys.insert(k.key).second) << "declared twice: " << k.key;
    EXPECT_FALSE(k.help.empty()) << k.key << " has no help";
    ASSERT_TRUE(c.has(std::string(k.key))) << k.key;
    if (k.part == "model") continue;  // the preset sets these
    nlohmann::json saved, declared;
    std::visit([&](auto&& v) { declared = v; }, k.default_value);
    saved = c.to_json()[std::string(k.key)];
    EXPECT_EQ(saved, declared) << k.key;
    if (!k.choices.empty())
      EXPECT_NE(std::find(k.choices.begin(), k.choices.end(), saved.get<std::string>()),
                k.choices.end())
          << k.key << "'s default is none of its choices";
  }
  EXPECT_EQ(keys.size(), c.keys().size()) << "a Config key that the table does not declare";
  EXPECT_NO_THROW(train_config_from(c));
}

// Each ranged key refuses the nearest value outside its range, naming the key and the range, and
// accepts its bounds where they are closed.
TEST(KeyTable, EveryRangeRefusesWhatLiesOutside) {
  int checked = 0;
  for (const KeySpec& k : key_specs()) {
    if (!k.range.checked) continue;
    const bool integer = k.type == "int";
    const std::string key(k.key), range = k.range.text(integer);
    auto value = [&](double v) { return integer ? str_cat(int64_t(v)) : str_cat(v); };
    const double below = integer ? k.range.lo - 1 : (k.range.lo_open ? k.range.lo : k.range.lo - 0.5);
    if (!(k.range.has_or_value && below == k.range.or_value)) {
      testing::expect_error(
          [&] { validate_run_config(Config::defaults({key + "=" + value(below)})); },
          {key + "=", "outside its valid range " + range});
      ++checked;
    }
    if (!k.range.lo_open) EXPECT_NO_THROW(validate_run_config(Config::defaults({key + "=" + value(k.range.lo)}))) << key;
    if (std::isfinite(k.range.hi) && k.range.hi < 1e15) {
      const double above = k.range.hi_open ? k.range.hi : k.range.hi + (integer ? 1 : 0.5);
      testing::expect_error(
          [&] { validate_run_config(Config::defaults({key + "=" + value(above)})); },
          {key + "=", range});
    }
  }
  EXPECT_GT(checked, 20);
}

TEST(KeyTable, AnEnumKeyNamesItsChoices) {
  for (const KeySpec& k : key_specs()) {
    if (k.choices.empty()) continue;
    const std::string key(k.key);
    for (std::string_view name : k.choices)
      EXPECT_NO_THROW(model_config_from(Config::defaults({key + "=" + std::string(name)})).validate())
          << key << "=" << name;
    std::vector<std::string> parts = {key, "nonesuch"};
    for (std::string_view name : k.choices) parts.emplace_back(name);
    testing::expect_error([&] { train_config_from(Config::defaults({key + "=nonesuch"})); }, parts);
  }
}

TEST(KeyTable, NoKeyIsBothGemmaxsAndUnimplementedMaxText) {
  for (const KeySpec& k : key_specs())
    if (const MaxTextKey* m = find_maxtext_key(k.key))
      ADD_FAILURE() << k.key << " is declared in keys.h and in maxtext_keys.cc (class "
                    << int(m->cls) << "): keep one";
  const nlohmann::json j = nlohmann::json::parse(key_table_json());
  EXPECT_EQ(j["keys"].size(), key_specs().size());
  EXPECT_EQ(j["maxtext_keys"].size(), maxtext_keys().size());
}

}  // namespace
}  // namespace gemmax
