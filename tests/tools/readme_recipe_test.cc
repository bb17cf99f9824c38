// The README's fine-tuning recipe on a release's and a dataset's real artifacts, run as the
// README writes it: the block between its recipe markers, in a fresh folder. Each step must
// succeed, the eval must report a finite loss on the answers, and the chat must answer
// without spelling its end-of-turn token.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace gemmax {
namespace {

std::string recipe_block() {
  const std::string readme = testing::read_file(std::string(GEMMAX_SOURCE_DIR) + "/README.md");
  const size_t begin = readme.find("<!-- recipe:begin -->"), end = readme.find("<!-- recipe:end -->");
  EXPECT_NE(begin, std::string::npos);
  EXPECT_NE(end, std::string::npos);
  std::string block = readme.substr(begin, end - begin);
  block = block.substr(block.find("```sh\n") + 6);
  return block.substr(0, block.rfind("```"));
}

TEST(ReadmeRecipe, ReleaseArtifactsToSftEvalExportAndChat) {
  testing::TempDir dir;
  const std::string script = dir / "recipe.sh";
  testing::write_file(script, recipe_block());
  std::string out;
  const int status = testing::run_command(
      "cd " + std::string(GEMMAX_SOURCE_DIR) + " && G=" + GEMMAX_BINARY + " W=" + dir.str() +
          " bash -eu " + script + " 2>&1",
      &out);
  ASSERT_EQ(status, 0) << out;
  // gemmax eval's figures: one JSON line.
  const size_t at = out.find("{\"eval/avg_loss\"");
  ASSERT_NE(at, std::string::npos) << out;
  const nlohmann::json eval = nlohmann::json::parse(out.substr(at, out.find('\n', at) - at));
  EXPECT_TRUE(std::isfinite(eval["eval/avg_loss"].get<double>())) << eval;
  EXPECT_GT(eval["eval/total_weights"].get<double>(), 0) << eval;
  // The chat's reply: the line before its statistics, without the end-of-turn text.
  const size_t stats = out.rfind("gemmax: prompt ");
  ASSERT_NE(stats, std::string::npos) << out;
  EXPECT_EQ(out.find("<turn|>"), std::string::npos) << out;
  EXPECT_NE(out.find("(0 from the cache) | reply "), std::string::npos) << out;
}

}  // namespace
}  // namespace gemmax
