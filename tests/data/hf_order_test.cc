// MaxText's HF-pipeline order (dataset_type=hf): numpy's default_rng and datasets' streaming
// shuffle against the real libraries' output, recorded by hf_order_fixtures/make_fixtures.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>

#include "gemmax/data/first_fit.h"
#include "gemmax/data/hf_dataset.h"
#include "gemmax/data/hf_shuffle.h"
#include "gemmax/data/loader.h"
#include "gemmax/data/numpy_random.h"
#include "test_util.h"

namespace gemmax {
namespace {

using json = nlohmann::json;

json fixture(const std::string& name) {
  std::ifstream in(std::string(GEMMAX_SOURCE_DIR) + "/tests/data/hf_order_fixtures/" + name);
  EXPECT_TRUE(in) << name;
  return json::parse(in);
}

uint64_t u64(const json& v) { return std::stoull(v.get<std::string>()); }

TEST(NumpyRandom, SeedSequenceStatesMatchNumpy) {
  const json f = fixture("numpy.json");
  ASSERT_GE(f["seed_sequence"].size(), 5u);
  for (const json& c : f["seed_sequence"]) {
    const uint64_t entropy = u64(c["entropy"]);
    EXPECT_EQ(json(numpy_seed_sequence_state(entropy, 8)), c["state32"]) << entropy;
    const std::vector<uint32_t> w = numpy_seed_sequence_state(entropy, 8);
    for (size_t i = 0; i < 4; ++i)
      EXPECT_EQ(uint64_t(w[2 * i]) | uint64_t(w[2 * i + 1]) << 32, u64(c["state64"][i]))
          << entropy << " word " << i;
  }
}

TEST(NumpyRandom, Pcg64OutputsMatchNumpy) {
  for (const json& c : fixture("numpy.json")["pcg64"]) {
    NumpyRandom rng(u64(c["seed"]));
    for (const json& v : c["next_uint64"]) EXPECT_EQ(rng.next_uint64(), u64(v)) << c["seed"];
  }
}

TEST(NumpyRandom, IntegersMatchNumpyAndLeaveItsState) {
  const json f = fixture("numpy.json");
  for (const json& c : f["integers"]) {
    NumpyRandom rng(c["seed"].get<uint64_t>());
    const int64_t high = int64_t(u64(c["high"]));
    for (const json& draws : c["draws"])
      for (const json& v : draws) EXPECT_EQ(rng.integers(0, high), int64_t(u64(v))) << high;
    // The buffered half of a 64-bit draw is not the next 64-bit draw: the state after is too.
    EXPECT_EQ(rng.next_uint64(), u64(c["after_uint64"])) << high;
  }
}

TEST(NumpyRandom, ShuffleAndPermutationMatchNumpy) {
  const json f = fixture("numpy.json");
  for (const json& c : f["shuffle"]) {
    NumpyRandom rng(c["seed"].get<uint64_t>());
    std::vector<int64_t> x(c["n"].get<size_t>());
    std::iota(x.begin(), x.end(), 0);
    rng.shuffle(std::span<int64_t>(x));
    EXPECT_EQ(json(x), c["result"]) << c["n"];
    EXPECT_EQ(rng.next_uint64(), u64(c["after_uint64"])) << c["n"];
  }
  for (const json& c : f["permutation"]) {
    const std::vector<uint64_t> p =
        NumpyRandom(c["seed"].get<uint64_t>()).permutation(c["n"].get<uint64_t>());
    const std::vector<uint64_t> head(p.begin(), p.begin() + std::min<size_t>(p.size(), 50));
    EXPECT_EQ(json(head), c["head"]) << c["n"];
    unsigned __int128 sum = 0;
    for (size_t i = 0; i < p.size(); ++i) sum += (unsigned __int128)i * p[i];
    EXPECT_EQ(uint64_t(sum), u64(c["sum_i_times_p"])) << c["n"];  // fits 64 bits at these sizes
  }
}

// The fixture of each datasets version the order follows.
const std::pair<int, const char*> kVersions[] = {{5, "order.json"}, {4, "order_datasets4.json"}};

TEST(HfShuffle, OrderIsMaxTextsHfPipelineBitForBit) {
  for (const auto& [major, file] : kVersions) {
    const json f = fixture(file);
    ASSERT_EQ(f["datasets_version"].get<std::string>()[0], char('0' + major));
    ASSERT_EQ(f["buffer_size"].get<uint64_t>(), kHfShuffleBuffer);
    ASSERT_GE(f["cases"].size(), 5u);
    for (const json& c : f["cases"]) {
      const std::vector<uint64_t> rows = c["rows"].get<std::vector<uint64_t>>();
      const uint64_t seed = c["seed"].get<uint64_t>();
      std::vector<uint64_t> got;
      for (uint64_t e = 0; e < c["epochs"].get<uint64_t>(); ++e) {
        const std::vector<uint64_t> epoch = hf_shuffled_rows(rows, seed + e, major);
        got.insert(got.end(), epoch.begin(), epoch.end());
      }
      EXPECT_EQ(json(got), c["ids"]) << file << ": " << c["name"] << " seed " << seed;
    }
  }
  // Files of fewer rows than the buffer are one permutation each in both versions; beyond it the
  // buffers differ.
  const json five = fixture("order.json"), four = fixture("order_datasets4.json");
  EXPECT_EQ(five["cases"][0]["ids"], four["cases"][0]["ids"]);
  EXPECT_NE(five["cases"][7]["ids"], four["cases"][7]["ids"]);
}

TEST(HfShuffle, LoaderOrderSkipsEmptyRowsAndReshufflesEachEpoch) {
  // 3 files of 700 rows, seed 0: the first recorded case; every third row gave no document.
  const json c = fixture("order.json")["cases"][0];
  ASSERT_EQ(c["name"], "parquet_3x700");
  ASSERT_EQ(c["seed"], 0);
  std::vector<int64_t> row_document(2100);
  int64_t docs = 0;
  for (size_t r = 0; r < row_document.size(); ++r) row_document[r] = r % 3 == 1 ? -1 : docs++;
  const HfShuffleOrder order({700, 700, 700}, row_document, 0, 5);
  std::vector<int64_t> want;
  for (const json& id : c["ids"])
    if (row_document[id.get<size_t>()] >= 0) want.push_back(row_document[id.get<size_t>()]);
  ASSERT_EQ(int64_t(want.size()), docs);
  for (int64_t p = 0; p < docs; ++p) ASSERT_EQ(int64_t(order.document(uint64_t(p))), want[p]) << p;
  EXPECT_EQ(order.epoch(uint64_t(docs) - 1), 0u);
  EXPECT_EQ(order.epoch(uint64_t(docs)), 1u);
  // Epoch 1 is seed 1's order, a different one, of the same documents; back to epoch 0 after.
  std::vector<int64_t> second;
  for (int64_t p = docs; p < 2 * docs; ++p) second.push_back(int64_t(order.document(uint64_t(p))));
  EXPECT_NE(second, want);
  std::vector<int64_t> sorted = second;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < docs; ++i) ASSERT_EQ(sorted[size_t(i)], i);
  EXPECT_EQ(int64_t(order.document(5)), want[5]);
}

// MaxText's hf packing, grain's PackAndBatchOperation, is first fit over the batch's rows of
// documents of at most max_target_length tokens: gemmax's first fit with use_truncation=true.
TEST(HfPacking, FirstFitIsGrainsPackAndBatchOperation) {
  const json f = fixture("packing.json");
  ASSERT_GE(f["cases"].size(), 3u);
  const uint32_t eos = f["eos"].get<uint32_t>();
  for (const json& c : f["cases"]) {
    std::vector<uint32_t> tokens;
    const std::vector<uint64_t> lengths = c["lengths"].get<std::vector<uint64_t>>();
    for (size_t d = 0; d < lengths.size(); ++d) {
      for (uint64_t i = 0; i + 1 < lengths[d]; ++i) tokens.push_back(uint32_t(1000 * d + 3 + i));
      tokens.push_back(eos);
    }
    Documents docs;
    docs.add(tokens, eos);
    const WindowShuffle in_order(docs.size(), 0, 0);
    const int64_t rows = c["batch"].get<int64_t>(), seq = c["seq"].get<int64_t>();
    StreamCursor cur;
    ASSERT_GE(c["batches"].size(), 2u);
    for (const json& want : c["batches"]) {
      Batch b;
      b.batch = rows, b.seq = seq;
      b.inputs.resize(size_t(rows * seq)), b.positions.resize(b.inputs.size());
      b.segment_ids.resize(b.inputs.size());
      pack_first_fit(docs, in_order, {rows, /*truncate=*/true, /*pad_fill=*/0}, cur, 0, b);
      std::vector<int32_t> inputs, segments, positions;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < seq; ++i) {
          inputs.push_back(want["inputs"][r][i].get<int32_t>());
          segments.push_back(want["segment_ids"][r][i].get<int32_t>());
          positions.push_back(want["positions"][r][i].get<int32_t>());
        }
      EXPECT_EQ(b.inputs, inputs);
      EXPECT_EQ(b.segment_ids, segments);
      EXPECT_EQ(b.positions, positions);
    }
  }
}

// The recorded case's dataset as JSON Lines files in `dir` ({"id": i, "text": "row i"}, as the
// fixture script wrote them).
void write_case(const json& c, const std::filesystem::path& dir) {
  uint64_t id = 0;
  for (size_t f = 0; f < c["files"].size(); ++f) {
    std::ofstream out(dir / c["files"][f].get<std::string>());
    for (uint64_t i = 0; i < c["rows"][f].get<uint64_t>(); ++i, ++id)
      out << json{{"id", id}, {"text", "row " + std::to_string(id)}}.dump() << "\n";
  }
}

// The ids of the documents a batch's row holds, segment by segment (byte tokenizer).
void row_ids(const Batch& b, std::vector<int64_t>& ids) {
  std::string text;
  for (int64_t i = 0; i <= b.seq; ++i) {
    const bool end = i == b.seq || (i > 0 && b.segment_ids[size_t(i)] != b.segment_ids[size_t(i - 1)]);
    if (end && text.rfind("row ", 0) == 0) ids.push_back(std::stoll(text.substr(4)));
    if (end) text.clear();
    if (i < b.seq && b.segment_ids[size_t(i)] > 0 && b.inputs[size_t(i)] >= 3)
      text += char(b.inputs[size_t(i)] - 3);
  }
}

TEST(HfOrderLoader, DocumentsComeInMaxTextsOrderAcrossEpochsAndResumeExactly) {
 for (const auto& [major, file] : kVersions) {
  SCOPED_TRACE(file);
  // 4 files (1200, 5, 640, 333 rows), seed 9, two epochs: MaxText with num_epoch=2.
  const json c = fixture(file)["cases"][9];
  ASSERT_EQ(c["name"], "jsonl_4_files_2_epochs");
  testing::TempDir dir;
  write_case(c, dir.path);
  // gemmax finds the files in the order `datasets` numbers them.
  std::vector<std::string> names;
  for (const std::string& f : hf_split_files({dir.path.string(), "", "", "train"}))
    names.push_back(std::filesystem::path(f).filename().string());
  EXPECT_EQ(json(names), c["files"]);
  DataOptions o;
  o.dataset_type = "hf";
  o.hf_path = dir.path.string();
  o.seq = 64;
  o.batch = 1;  // one row: first-fit places the documents in stream order
  o.vocab_size = 259;
  o.packing_type = "first_fit";
  o.shuffle = true;
  o.shuffle_buffer = 3;  // grain's window: not the HF order's
  o.seed = 9;
  o.hf_datasets_version = major;
  auto loader = make_data_loader(o);
  EXPECT_NE(loader->describe().find("MaxText's HF-pipeline order"), std::string::npos)
      << loader->describe();
  std::vector<int64_t> ids;
  json mid;
  std::vector<Batch> after_mid;
  const size_t want = c["ids"].size();
  while (ids.size() < want) {
    const Batch b = loader->next();
    if (!mid.is_null() && after_mid.size() < 40) after_mid.push_back(b);
    row_ids(b, ids);
    if (mid.is_null() && ids.size() > want * 3 / 4) mid = loader->state();  // in epoch 1
  }
  ids.resize(want);
  EXPECT_EQ(json(ids), c["ids"]);
  EXPECT_EQ(mid["order"], "hf");
  EXPECT_EQ(mid["epoch"], 1);
  // A new loader restored from the state reads the same batches (its epoch's order recomputed).
  auto resumed = make_data_loader(o);
  resumed->next();
  resumed->restore(mid);
  for (const Batch& b : after_mid) {
    const Batch r = resumed->next();
    ASSERT_EQ(r.inputs, b.inputs);
    ASSERT_EQ(r.segment_ids, b.segment_ids);
    ASSERT_EQ(r.targets, b.targets);
  }
  // Another seed's state, and a state of grain's order, are refused.
  DataOptions other = o;
  other.seed = 10;
  testing::expect_error([&] { make_data_loader(other)->restore(mid); }, {"seed", "data_shuffle_seed"});
  json grain_state = mid;
  grain_state["order"] = "grain";
  testing::expect_error([&] { make_data_loader(o)->restore(grain_state); },
                        {"grain's window-shuffle order", "MaxText's HF-pipeline order"});
  // Unshuffled, the rows come in file order.
  DataOptions plain = o;
  plain.shuffle = false;
  ids.clear();
  auto p = make_data_loader(plain);
  while (ids.size() < 100) row_ids(p->next(), ids);
  for (int64_t i = 0; i < 100; ++i) ASSERT_EQ(ids[size_t(i)], i);
  // The other datasets version's state is refused.
  DataOptions version = o;
  version.hf_datasets_version = 9 - major;
  testing::expect_error([&] { make_data_loader(version)->restore(mid); }, {"hf_datasets_version"});
 }
}

}  // namespace
}  // namespace gemmax
