#include "gemmax/data/token_shard.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "test_util.h"

namespace gemmax {
namespace {

using testing::expect_error;
using testing::TempDir;

// vocab 259, eos 1, bos 2, pad 0 (the byte tokenizer's layout).
std::string write_small_shard(const TempDir& dir, const std::string& name = "a.bin") {
  const std::string path = dir.file(name);
  ShardWriter w(path, 259, 1, 2, 0);
  std::vector<int32_t> d0 = {3, 4, 5}, d1 = {}, d2 = {6};
  w.add_document(d0, true);
  w.add_document(d1, true);
  w.add_document(d2, false);
  w.finish();
  return path;
}

void patch_u32(const std::string& path, size_t at, uint32_t v) {
  std::string b = testing::read_file(path);
  std::memcpy(b.data() + at, &v, 4);
  testing::write_file(path, b);
}

TEST(TokenShard, RoundTrip) {
  TempDir dir;
  const std::string path = write_small_shard(dir);
  TokenShard s(path);
  EXPECT_EQ(s.header().version, 1u) << "no loss mask: version 1";
  EXPECT_EQ(s.header().dtype, kShardDtypeUint32);
  EXPECT_EQ(s.header().num_tokens, 9u);
  EXPECT_EQ(s.header().num_documents, 3u);
  EXPECT_EQ(s.header().vocab_size, 259u);
  EXPECT_EQ(s.header().eos_id, 1u);
  EXPECT_EQ(s.header().bos_id, 2u);
  EXPECT_EQ(s.header().pad_id, 0u);
  const std::vector<uint32_t> want = {2, 3, 4, 5, 1, 2, 1, 6, 1};
  EXPECT_EQ(std::vector<uint32_t>(s.tokens().begin(), s.tokens().end()), want);
  EXPECT_NO_THROW(s.validate_tokens(259));
  EXPECT_EQ(std::filesystem::file_size(path), kShardHeaderBytes + 4 * want.size());
  // Only the shard remains: the temporary file was renamed.
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path)) ++files, (void)e;
  EXPECT_EQ(files, 1);
}

TEST(TokenShard, HeaderBytesAreLittleEndianAtDocumentedOffsets) {
  TempDir dir;
  const std::string b = testing::read_file(write_small_shard(dir));
  ASSERT_GE(b.size(), kShardHeaderBytes);
  EXPECT_EQ(b.substr(0, 8), "GMXTOKEN");
  auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, b.data() + at, 4);
    return v;
  };
  auto u64 = [&](size_t at) {
    uint64_t v;
    std::memcpy(&v, b.data() + at, 8);
    return v;
  };
  EXPECT_EQ(u32(8), 1u);
  EXPECT_EQ(u32(12), 1u);
  EXPECT_EQ(u64(16), 9u);
  EXPECT_EQ(u64(24), 3u);
  EXPECT_EQ(u32(32), 259u);
  EXPECT_EQ(u32(36), 1u);
  EXPECT_EQ(u32(40), 2u);
  EXPECT_EQ(u32(44), 0u);
  for (size_t i = 48; i < 64; ++i) EXPECT_EQ(b[i], 0) << i;
  EXPECT_EQ(u32(64), 2u);  // first token: bos
}

TEST(TokenShard, NoBosIdWritesNone) {
  TempDir dir;
  const std::string path = dir.file("nobos.bin");
  ShardWriter w(path, 10, 1, -1, -1);
  std::vector<int32_t> d = {5, 6};
  w.add_document(d, true);  // no bos to add
  w.finish();
  TokenShard s(path);
  EXPECT_EQ(s.header().bos_id, kShardNoId);
  EXPECT_EQ(s.header().pad_id, kShardNoId);
  EXPECT_EQ(s.tokens().size(), 3u);
}

TEST(TokenShard, WriterRejectsBadIdsAndLeavesNothingBehind) {
  TempDir dir;
  {
    ShardWriter w(dir.file("x.bin"), 259, 1, 2, 0);
    std::vector<int32_t> bad = {3, 259};
    expect_error([&] { w.add_document(bad, true); },
                 {"x.bin", "259", "outside the tokenizer's vocabulary"});
    std::vector<int32_t> with_eos = {3, 1, 4};
    expect_error([&] { w.add_document(with_eos, true); }, {"eos"});
  }  // abandoned without finish(): the temporary file is removed
  EXPECT_TRUE(std::filesystem::is_empty(dir.path));
  expect_error([&] { ShardWriter w(dir.file("y.bin"), 259, -1, 2, 0); }, {"eos"});
  expect_error([&] { ShardWriter w(dir.file("no/such/dir/z.bin"), 259, 1, 2, 0); },
               {"cannot create"});
}

TEST(TokenShard, MissingFile) {
  TempDir dir;
  expect_error([&] { TokenShard s(dir.file("nope.bin")); }, {"nope.bin", "cannot open"});
}

TEST(TokenShard, WrongMagic) {
  TempDir dir;
  const std::string path = write_small_shard(dir);
  std::string b = testing::read_file(path);
  std::memcpy(b.data(), "NOTTOKEN", 8);
  testing::write_file(path, b);
  expect_error([&] { TokenShard s(path); },
               {path, "magic", "GMXTOKEN", "NOTTOKEN", "gemmax tokenize"});
}

TEST(TokenShard, UnknownVersionAndDtype) {
  TempDir dir;
  const std::string path = write_small_shard(dir);
  patch_u32(path, 8, 7);
  expect_error([&] { TokenShard s(path); }, {path, "version", "expected 1", "got 7"});
  patch_u32(path, 8, 1);
  patch_u32(path, 12, 9);
  expect_error([&] { TokenShard s(path); }, {path, "dtype", "expected 1", "got 9"});
}

TEST(TokenShard, ShorterThanHeader) {
  TempDir dir;
  const std::string path = dir.file("short.bin");
  testing::write_file(path, "GMXTOKEN\x01");
  expect_error([&] { TokenShard s(path); }, {path, "9 bytes", "shorter than the 64-byte header"});
  testing::write_file(path, "");
  expect_error([&] { TokenShard s(path); }, {path, "0 bytes"});
}

TEST(TokenShard, Truncated) {
  TempDir dir;
  const std::string path = write_small_shard(dir);
  std::string b = testing::read_file(path);
  b.resize(b.size() - 6);
  testing::write_file(path, b);
  expect_error([&] { TokenShard s(path); },
               {path, "truncated", "num_tokens", "9 tokens", "expected 100 bytes", "got 94"});
}

TEST(TokenShard, CountMismatch) {
  TempDir dir;
  const std::string path = write_small_shard(dir);
  testing::write_file(path, testing::read_file(path) + std::string(8, '\0'));
  expect_error([&] { TokenShard s(path); },
               {path, "count mismatch", "num_tokens", "expected 100 bytes", "got 108"});
  // Documents: the header's count must match the eos tokens.
  const std::string p2 = write_small_shard(dir, "b.bin");
  patch_u32(p2, 24, 4);
  TokenShard s(p2);
  expect_error([&] { s.validate_tokens(259); }, {p2, "num_documents", "4", "3 eos"});
}

TEST(TokenShard, TokenOutsideModelVocab) {
  TempDir dir;
  const std::string path = dir.file("big.bin");
  ShardWriter w(path, 1000, 1, 2, 0);
  std::vector<int32_t> d = {3, 4, 500, 6};
  w.add_document(d, true);
  w.finish();
  TokenShard s(path);
  EXPECT_NO_THROW(s.validate_tokens(1000));
  // bos 3 4 500: index 3 holds the first id outside a 259-token vocabulary.
  expect_error([&] { s.validate_tokens(259); },
               {path, "token 3", "id 500", "vocab_size 259", "vocabulary size 1000", "tokenizer"});
  // A tokenizer wider than the model is refused even where the ids happen to fit.
  const std::string fits = dir.file("fits.bin");
  ShardWriter f(fits, 700, 1, 2, 0);
  f.add_document(d = {3, 4, 200, 6}, true);
  f.finish();
  EXPECT_NO_THROW(TokenShard(fits).validate_tokens(700));
  expect_error(
      [&] { TokenShard(fits).validate_tokens(259); },
      {fits, "vocabulary (700 ids) is larger than the model's (vocab_size 259)", "re-tokenize"});
}

}  // namespace
}  // namespace gemmax
