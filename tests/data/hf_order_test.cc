// MaxText's HF-pipeline order (dataset_type=hf): numpy's default_rng and datasets' streaming
// shuffle against the real libraries' output, recorded by hf_order_fixtures/make_fixtures.py.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>

#include "gemmax/data/hf_shuffle.h"
#include "gemmax/data/numpy_random.h"

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

TEST(HfShuffle, OrderIsMaxTextsHfPipelineBitForBit) {
  const json f = fixture("order.json");
  ASSERT_EQ(f["buffer_size"].get<uint64_t>(), kHfShuffleBuffer);
  ASSERT_GE(f["cases"].size(), 5u);
  for (const json& c : f["cases"]) {
    const std::vector<uint64_t> rows = c["rows"].get<std::vector<uint64_t>>();
    const uint64_t seed = c["seed"].get<uint64_t>();
    std::vector<uint64_t> got;
    for (uint64_t e = 0; e < c["epochs"].get<uint64_t>(); ++e) {
      const std::vector<uint64_t> epoch = hf_shuffled_rows(rows, seed + e);
      got.insert(got.end(), epoch.begin(), epoch.end());
    }
    EXPECT_EQ(json(got), c["ids"]) << c["name"] << " seed " << seed;
  }
}

TEST(HfShuffle, LoaderOrderSkipsEmptyRowsAndReshufflesEachEpoch) {
  // 3 files of 700 rows, seed 0: the first recorded case; every third row gave no document.
  const json c = fixture("order.json")["cases"][0];
  ASSERT_EQ(c["name"], "parquet_3x700");
  ASSERT_EQ(c["seed"], 0);
  std::vector<int64_t> row_document(2100);
  int64_t docs = 0;
  for (size_t r = 0; r < row_document.size(); ++r) row_document[r] = r % 3 == 1 ? -1 : docs++;
  const HfShuffleOrder order({700, 700, 700}, row_document, 0);
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

}  // namespace
}  // namespace gemmax
