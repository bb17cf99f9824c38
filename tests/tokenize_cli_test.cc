// `gemmax tokenize` end to end, through the binary.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "data_test_util.h"
#include "gemmax/data/token_shard.h"

namespace gemmax {
namespace {

// Runs a command, returns its exit status and stdout+stderr.
int run(const std::string& cmd, std::string* out) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(TokenizeCli, WritesAShardAndReportsErrors) {
  const std::string bin = GEMMAX_BINARY;
  std::string help;
  run(bin + " tokenize --help", &help);
  if (help.find("usage: gemmax tokenize") == std::string::npos)
    GTEST_SKIP() << "this gemmax binary does not dispatch `tokenize` yet";

  testing::TempDir dir;
  testing::write_file(dir.file("a.txt"), "first line\n\nsecond line\n");
  const std::string shard = dir.file("out.bin");
  std::string out;
  ASSERT_EQ(run(bin + " tokenize --out " + shard + " --lines " + dir.file("a.txt"), &out), 0)
      << out;
  EXPECT_NE(out.find("2 documents"), std::string::npos) << out;
  TokenShard s(shard);
  EXPECT_EQ(s.header().num_documents, 2u);
  EXPECT_EQ(s.header().num_tokens, 2u + 10 + 11 + 2);

  out.clear();
  EXPECT_NE(run(bin + " tokenize --out " + dir.file("x.bin") + " " + dir.file("missing.txt"), &out),
            0);
  EXPECT_NE(out.find("missing.txt"), std::string::npos) << out;
  out.clear();
  EXPECT_NE(run(bin + " tokenize " + dir.file("a.txt"), &out), 0);
  EXPECT_NE(out.find("--out"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.bin")));
}

}  // namespace
}  // namespace gemmax
