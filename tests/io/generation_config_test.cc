// generation_config.json as transformers' GenerationConfig reads it: one eos id or a list, null as
// absent, transformers' defaults for what the file leaves out; wrong types named with the file.
#include "gemmax/io/generation_config.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace gemmax {
namespace {
using testing::expect_error;

TEST(GenerationConfig, EosIdsSamplingFieldsAndTransformersDefaults) {
  // Gemma-4's: a list of eos ids and sampling on.
  const HfGenerationConfig g = parse_generation_config(
      R"({"bos_token_id": 2, "do_sample": true, "eos_token_id": [1, 106], "pad_token_id": 0,
          "temperature": 1.0, "top_k": 64, "top_p": 0.95, "transformers_version": "5.0.0"})",
      "f");
  EXPECT_EQ(g.eos_ids, (std::vector<int32_t>{1, 106}));
  EXPECT_TRUE(g.do_sample);
  EXPECT_EQ(g.top_k, 64);
  EXPECT_DOUBLE_EQ(g.top_p, 0.95);

  const HfGenerationConfig one = parse_generation_config(R"({"eos_token_id": 7})", "f");
  EXPECT_EQ(one.eos_ids, (std::vector<int32_t>{7}));
  // transformers' defaults: greedy, temperature 1, top_k 50, top_p 1; null is "not set".
  for (const char* text : {"{}", R"({"do_sample": null, "top_k": null, "eos_token_id": null})"}) {
    const HfGenerationConfig d = parse_generation_config(text, "f");
    EXPECT_TRUE(d.eos_ids.empty()) << text;
    EXPECT_FALSE(d.do_sample) << text;
    EXPECT_EQ(d.temperature, 1.0) << text;
    EXPECT_EQ(d.top_k, 50) << text;
    EXPECT_EQ(d.top_p, 1.0) << text;
  }
}

TEST(GenerationConfig, BadFieldsNameTheFileAndTheField) {
  expect_error([] { parse_generation_config("{", "'m/generation_config.json'"); },
               {"'m/generation_config.json'", "not JSON"});
  expect_error([] { parse_generation_config("[1]", "'g'"); }, {"'g'", "JSON object"});
  expect_error([] { parse_generation_config(R"({"eos_token_id": "1"})", "'g'"); },
               {"'g'", "'eos_token_id' must be a token id", "got \"1\""});
  expect_error([] { parse_generation_config(R"({"eos_token_id": [1, -2]})", "'g'"); },
               {"'eos_token_id'", "got -2"});
  expect_error([] { parse_generation_config(R"({"do_sample": 1})", "'g'"); },
               {"'do_sample' must be true or false"});
  expect_error([] { parse_generation_config(R"({"top_p": 0})", "'g'"); },
               {"'top_p' must be a number in (0, 1]"});
  expect_error([] { parse_generation_config(R"({"top_k": 1.5})", "'g'"); },
               {"'top_k' must be an integer >= 0"});
  expect_error([] { parse_generation_config(R"({"temperature": -1})", "'g'"); },
               {"'temperature' must be a number >= 0"});
}

TEST(GenerationConfig, AFolderWithoutTheFileHasNone) {
  testing::TempDir dir;
  EXPECT_FALSE(read_generation_config(dir.str()).has_value());
  testing::write_file(dir / "generation_config.json", R"({"eos_token_id": [3, 4]})");
  const auto g = read_generation_config(dir.str());
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->eos_ids, (std::vector<int32_t>{3, 4}));
}

}  // namespace
}  // namespace gemmax
