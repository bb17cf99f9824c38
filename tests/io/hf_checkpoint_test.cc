#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "gemmax/io/atomic_file.h"
#include "gemmax/io/hf_checkpoint.h"
#include "test_util.h"

namespace gemmax {
namespace {

using testing::expect_error;
using testing::random_bytes;
using testing::read_file;
using testing::TempDir;
using testing::write_file;


// Five tensors of 400, 400, 400, 200, 1000 bytes.
NamedTensors sample() {
  return {{"model.embed_tokens.weight", random_bytes({10, 20}, DType::BF16, 1)},
          {"model.layers.0.mlp.up_proj.weight", random_bytes({10, 10}, DType::F32, 2)},
          {"model.layers.0.mlp.down_proj.weight", random_bytes({50}, DType::F64, 3)},
          {"model.layers.0.layer_scalar", random_bytes({100}, DType::BF16, 4)},
          {"model.norm.weight", random_bytes({250}, DType::F32, 5)}};
}

void expect_same(const HfCheckpoint& c, const NamedTensors& ts) {
  EXPECT_EQ(c.names().size(), ts.size());
  for (const auto& [name, t] : ts) {
    ASSERT_TRUE(c.has(name)) << name;
    EXPECT_EQ(c.entry(name).dtype, t.dtype());
    EXPECT_EQ(c.entry(name).shape, t.shape());
    const Tensor v = c.tensor(name);
    EXPECT_EQ(std::memcmp(v.raw(), t.raw(), t.nbytes()), 0) << name;
  }
}

TEST(HfCheckpoint, SingleFileWhenItFits) {
  TempDir dir;
  const NamedTensors ts = sample();
  write_hf_checkpoint(dir.str(), ts, 1 << 20);
  EXPECT_EQ(dir.list(), std::vector<std::string>{"model.safetensors"});
  HfCheckpoint c = HfCheckpoint::open(dir.str());
  EXPECT_FALSE(c.sharded());
  expect_same(c, ts);
  EXPECT_EQ(c.shard_of("model.norm.weight"), "model.safetensors");
  // transformers refuses safetensors files without __metadata__.format.
  EXPECT_EQ(SafetensorsFile::open(dir / "model.safetensors").metadata().at("format"), "pt");
  const Tensor f = c.read_as("model.embed_tokens.weight", DType::F32);
  EXPECT_EQ(f.data<float>()[7], float(ts[0].second.data<bf16>()[7]));
}

TEST(HfCheckpoint, ShardedWithIndex) {
  TempDir dir;
  const NamedTensors ts = sample();
  write_hf_checkpoint(dir / "ckpt", ts, 800, {{"step", "12"}});  // creates the folder
  // 400+400 | 400+200 | 1000 (larger than a shard: alone)
  const std::string root = dir / "ckpt";
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(root))
    files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{
                       "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                       "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));
  const auto index = nlohmann::json::parse(read_file(root + "/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 2400);
  EXPECT_EQ(index["weight_map"]["model.embed_tokens.weight"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["model.layers.0.mlp.up_proj.weight"],
            "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["model.layers.0.layer_scalar"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["model.norm.weight"], "model-00003-of-00003.safetensors");

  HfCheckpoint c = HfCheckpoint::open(root);
  EXPECT_TRUE(c.sharded());
  expect_same(c, ts);
  EXPECT_EQ(c.shard_of("model.layers.0.mlp.down_proj.weight"), "model-00002-of-00003.safetensors");
  const auto md = SafetensorsFile::open(root + "/model-00002-of-00003.safetensors").metadata();
  EXPECT_EQ(md.at("format"), "pt");
  EXPECT_EQ(md.at("step"), "12");
  expect_error([&] { c.tensor("lm_head.weight"); }, {root, "lm_head.weight"});
}

TEST(HfCheckpoint, RewritingRemovesStaleFiles) {
  TempDir dir;
  NamedTensors ts = sample();
  write_hf_checkpoint(dir.str(), ts, 800);   // 3 shards
  write_hf_checkpoint(dir.str(), ts, 1200);  // 400+400+400 | 200+1000: 2 shards
  EXPECT_EQ(dir.list(), (std::vector<std::string>{"model-00001-of-00002.safetensors",
                                                  "model-00002-of-00002.safetensors",
                                                  "model.safetensors.index.json"}));
  expect_same(HfCheckpoint::open(dir.str()), ts);
  write_hf_checkpoint(dir.str(), ts, 1 << 20);  // single file
  EXPECT_EQ(dir.list(), std::vector<std::string>{"model.safetensors"});
  expect_same(HfCheckpoint::open(dir.str()), ts);
  write_hf_checkpoint(dir.str(), ts, 1000);  // back to shards
  const std::vector<std::string> files = dir.list();
  EXPECT_EQ(files.back(), "model.safetensors.index.json");
  EXPECT_EQ(std::count(files.begin(), files.end(), "model.safetensors"), 0);
  expect_same(HfCheckpoint::open(dir.str()), ts);
}

TEST(HfCheckpoint, DiskFullMidwayLeavesNoCompleteLookingFolder) {
  TempDir dir;
  NamedTensors ts = sample();
  write_hf_checkpoint(dir.str(), ts, 800);
  // A file-size limit between the sizes of shards 1-2 and shard 3 fails the write in its last
  // shard (EFBIG, as a full disk fails it with ENOSPC), after two complete new shards.
  const auto size = [&](int shard) {
    return std::filesystem::file_size(
        dir / ("model-0000" + std::to_string(shard) + "-of-00003.safetensors"));
  };
  const uintmax_t largest_first = std::max(size(1), size(2));
  ASSERT_LT(largest_first, size(3));
  {
    testing::FileSizeLimit limit(largest_first);
    expect_error([&] { write_hf_checkpoint(dir.str(), ts, 800); },
                 {"model-00003-of-00003.safetensors", "File too large"});
  }
  for (const std::string& f : dir.list()) EXPECT_EQ(f.find(".tmp."), std::string::npos) << f;
  // No index: the folder is not mistaken for a complete checkpoint.
  expect_error([&] { HfCheckpoint::open(dir.str()); }, {"neither", "model-00001-of-00003"});
}

TEST(HfCheckpoint, ValidationErrors) {
  TempDir dir;
  const NamedTensors ts = sample();
  write_hf_checkpoint(dir.str(), ts, 800);
  const std::string index_path = dir / "model.safetensors.index.json";
  const std::string good_index = read_file(index_path);
  auto index = nlohmann::json::parse(good_index);

  // A shard the index names is missing.
  std::filesystem::remove(dir / "model-00003-of-00003.safetensors");
  expect_error([&] { HfCheckpoint::open(dir.str()); },
               {"model-00003-of-00003.safetensors", "model.norm.weight", "does not exist"});
  write_hf_checkpoint(dir.str(), ts, 800);

  // The index names a tensor its shard does not hold.
  auto bad = index;
  bad["weight_map"]["model.extra.weight"] = "model-00001-of-00003.safetensors";
  write_file(index_path, bad.dump());
  expect_error([&] { HfCheckpoint::open(dir.str()); },
               {"model.extra.weight", "model-00001-of-00003.safetensors", "no such tensor"});

  bad = index;
  bad["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors";
  write_file(index_path, bad.dump());
  expect_error([&] { HfCheckpoint::open(dir.str()); }, {"not a plain file name"});

  write_file(index_path, "{\"weight_map\": [1, 2]}");
  expect_error([&] { HfCheckpoint::open(dir.str()); }, {index_path, "\"weight_map\" object"});
  write_file(index_path, "{oops");
  expect_error([&] { HfCheckpoint::open(dir.str()); }, {index_path, "not valid JSON"});

  // Both forms present: ambiguous.
  write_file(index_path, good_index);
  write_safetensors(dir / "model.safetensors", {{"x", random_bytes({1}, DType::F32, 9)}});
  expect_error([&] { HfCheckpoint::open(dir.str()); }, {"both", "stale"});
}

TEST(HfCheckpoint, NothingToReadListsTheFolder) {
  TempDir dir;
  write_file(dir / "pytorch_model.bin", "x");
  write_file(dir / "config.json", "{}");
  expect_error([&] { HfCheckpoint::open(dir.str()); },
               {dir.str(), "model.safetensors", "found: config.json, pytorch_model.bin"});
  expect_error([&] { HfCheckpoint::open(dir / "missing"); }, {"not a directory"});
}

TEST(HfCheckpoint, WriterValidatesBeforeTouchingTheFolder) {
  TempDir dir;
  const NamedTensors ts = sample();
  write_hf_checkpoint(dir.str(), ts, 800);
  NamedTensors dup = ts;
  dup.push_back(ts[0]);
  expect_error([&] { write_hf_checkpoint(dir.str(), dup, 800); }, {"appears twice"});
  NamedTensors undef = ts;
  undef.emplace_back("u", Tensor());
  expect_error([&] { write_hf_checkpoint(dir.str(), undef, 800); }, {"'u'", "undefined"});
  expect_same(HfCheckpoint::open(dir.str()), ts);  // the previous checkpoint is untouched
  EXPECT_EQ(hf_shard_name(2, 17), "model-00002-of-00017.safetensors");
}

}  // namespace
}  // namespace gemmax
