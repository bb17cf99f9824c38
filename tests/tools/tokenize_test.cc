// `gemmax tokenize` end to end, through the binary.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "test_util.h"
#include "gemmax/data/token_shard.h"

namespace gemmax {
namespace {

using testing::run_command;

TEST(TokenizeCli, WritesAShardAndReportsErrors) {
  const std::string bin = GEMMAX_BINARY;
  std::string help;
  ASSERT_EQ(run_command(bin + " tokenize --help", &help), 0);
  EXPECT_NE(help.find("usage: gemmax tokenize"), std::string::npos) << help;

  testing::TempDir dir;
  testing::write_file(dir.file("a.txt"), "first line\n\nsecond line\n");
  const std::string shard = dir.file("out.bin");
  std::string out;
  ASSERT_EQ(run_command(bin + " tokenize --out " + shard + " --lines " + dir.file("a.txt"), &out), 0)
      << out;
  EXPECT_NE(out.find("2 documents"), std::string::npos) << out;
  TokenShard s(shard);
  EXPECT_EQ(s.header().num_documents, 2u);
  EXPECT_EQ(s.header().num_tokens, 2u + 10 + 11 + 2);

  out.clear();
  EXPECT_NE(run_command(bin + " tokenize --out " + dir.file("x.bin") + " " + dir.file("missing.txt"), &out),
            0);
  EXPECT_NE(out.find("missing.txt"), std::string::npos) << out;
  out.clear();
  EXPECT_NE(run_command(bin + " tokenize " + dir.file("a.txt"), &out), 0);
  EXPECT_NE(out.find("--out"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.bin")));
}

}  // namespace
}  // namespace gemmax
