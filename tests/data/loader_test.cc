#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "test_util.h"
#include "gemmax/data/builtin_corpus.h"
#include "gemmax/data/first_fit.h"
#include "gemmax/data/loader.h"
#include "gemmax/data/packing.h"
#include "gemmax/data/token_shard.h"

namespace gemmax {
namespace {

using testing::expect_error;
using testing::TempDir;
using V = std::vector<int32_t>;

// Byte-tokenizer layout: pad 0, eos 1, bos 2.
constexpr int32_t kPad = 0, kEos = 1, kBos = 2;

V row_of(const std::vector<int32_t>& v, const Batch& b, int64_t r) {
  return V(v.begin() + r * b.seq, v.begin() + (r + 1) * b.seq);
}

// MaxText's packed-batch rules, checked on any batch.
void check_invariants(const Batch& b, int32_t pad) {
  ASSERT_EQ(b.inputs.size(), size_t(b.batch * b.seq));
  for (auto* v : {&b.targets, &b.positions, &b.segment_ids, &b.target_segment_ids})
    ASSERT_EQ(v->size(), b.inputs.size());
  for (int64_t r = 0; r < b.batch; ++r) {
    for (int64_t c = 0; c < b.seq; ++c) {
      const int64_t i = r * b.seq + c;
      const int32_t seg = b.segment_ids[i];
      if (seg == 0) {  // padding: only at the end of the row
        EXPECT_EQ(b.inputs[i], pad);
        if (c + 1 < b.seq) EXPECT_EQ(b.segment_ids[i + 1], 0);
      } else if (c == 0 || b.segment_ids[i - 1] != seg) {  // a segment starts
        EXPECT_EQ(b.positions[i], 0);
        EXPECT_EQ(seg, c == 0 ? 1 : b.segment_ids[i - 1] + 1);
      } else {
        EXPECT_EQ(b.positions[i], b.positions[i - 1] + 1);
      }
      if (c + 1 < b.seq) {
        EXPECT_EQ(b.targets[i], b.inputs[i + 1]);
        EXPECT_EQ(b.target_segment_ids[i], b.inputs[i + 1] == pad ? 0 : b.segment_ids[i + 1]);
      } else {
        EXPECT_EQ(b.targets[i], pad);
        EXPECT_EQ(b.target_segment_ids[i], 0);
      }
    }
  }
}

// Documents of the given lengths (content: 10*doc + i, framed bos .. eos).
std::vector<uint32_t> make_docs(std::vector<int> lengths) {
  std::vector<uint32_t> t;
  for (size_t d = 0; d < lengths.size(); ++d) {
    t.push_back(kBos);
    for (int i = 0; i < lengths[d] - 2; ++i) t.push_back(uint32_t(10 * (d + 1) + i));
    t.push_back(kEos);
  }
  return t;
}

Batch empty_batch(int64_t rows, int64_t seq) {
  Batch b;
  b.batch = rows;
  b.seq = seq;
  b.inputs.resize(size_t(rows * seq));
  b.positions.resize(b.inputs.size());
  b.segment_ids.resize(b.inputs.size());
  return b;
}

TEST(Documents, SplitAtEos) {
  const std::vector<uint32_t> a = {2, 5, 1, 2, 1}, b = {7, 8, 1, 9};
  Documents d;
  d.add(a, kEos);
  d.add(b, kEos);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d.num_tokens(), 9u);
  auto v = [&](uint64_t i) { return std::vector<uint32_t>(d[i].begin(), d[i].end()); };
  EXPECT_EQ(v(0), (std::vector<uint32_t>{2, 5, 1}));
  EXPECT_EQ(v(1), (std::vector<uint32_t>{2, 1}));
  EXPECT_EQ(v(2), (std::vector<uint32_t>{7, 8, 1}));
  EXPECT_EQ(v(3), (std::vector<uint32_t>{9}));  // trailing tokens without eos
}

// A: 4 tokens, B: 3, C: 11 (longer than a row), D: 3; rows of 8.
TEST(Packing, HandMadeDocuments) {
  const auto tokens = make_docs({4, 3, 11, 3});
  Documents docs;
  docs.add(tokens, kEos);
  Batch b = empty_batch(4, 8);
  PackCursor cur;
  for (int r = 0; r < 4; ++r) pack_row(docs, true, kPad, cur, b, r);
  make_targets(b, kPad, kPad);
  check_invariants(b, kPad);

  // Row 0: A and B; C's first piece (8 tokens) does not fit the last column: padding.
  EXPECT_EQ(row_of(b.inputs, b, 0), (V{2, 10, 11, 1, 2, 20, 1, 0}));
  EXPECT_EQ(row_of(b.segment_ids, b, 0), (V{1, 1, 1, 1, 2, 2, 2, 0}));
  EXPECT_EQ(row_of(b.positions, b, 0), (V{0, 1, 2, 3, 0, 1, 2, 0}));
  EXPECT_EQ(row_of(b.targets, b, 0), (V{10, 11, 1, 2, 20, 1, 0, 0}));
  // A's eos -> B's bos is counted (segment 2); B's eos -> padding and the last column are not.
  EXPECT_EQ(row_of(b.target_segment_ids, b, 0), (V{1, 1, 1, 2, 2, 2, 0, 0}));
  // Row 1: C's first piece fills the row; its last target (beyond the row) is not counted.
  EXPECT_EQ(row_of(b.inputs, b, 1), (V{2, 30, 31, 32, 33, 34, 35, 36}));
  EXPECT_EQ(row_of(b.segment_ids, b, 1), (V{1, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(row_of(b.positions, b, 1), (V{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(row_of(b.target_segment_ids, b, 1), (V{1, 1, 1, 1, 1, 1, 1, 0}));
  // Row 2: the rest of C (its own segment, positions from 0), D, then A (4) does not fit in 2.
  EXPECT_EQ(row_of(b.inputs, b, 2), (V{37, 38, 1, 2, 40, 1, 0, 0}));
  EXPECT_EQ(row_of(b.segment_ids, b, 2), (V{1, 1, 1, 2, 2, 2, 0, 0}));
  EXPECT_EQ(row_of(b.positions, b, 2), (V{0, 1, 2, 0, 1, 2, 0, 0}));
  EXPECT_EQ(row_of(b.target_segment_ids, b, 2), (V{1, 1, 2, 2, 2, 0, 0, 0}));
  // Row 3: wrapped around to A and B (epoch 1).
  EXPECT_EQ(row_of(b.inputs, b, 3), row_of(b.inputs, b, 0));
  EXPECT_EQ(cur, (PackCursor{2, 0, 1}));
  EXPECT_EQ(b.num_target_tokens(), 6 + 7 + 5 + 6);
}

TEST(Packing, WrapsWithinARow) {
  const auto tokens = make_docs({3, 2});  // 5 tokens in all
  Documents docs;
  docs.add(tokens, kEos);
  Batch b = empty_batch(1, 8);
  PackCursor cur;
  pack_row(docs, true, kPad, cur, b, 0);
  make_targets(b, kPad, kPad);
  check_invariants(b, kPad);
  EXPECT_EQ(row_of(b.inputs, b, 0), (V{2, 10, 1, 2, 1, 2, 10, 1}));
  EXPECT_EQ(row_of(b.segment_ids, b, 0), (V{1, 1, 1, 2, 2, 3, 3, 3}));
  EXPECT_EQ(cur, (PackCursor{1, 0, 1}));
}

TEST(Packing, NoPackingOneDocumentOrPiecePerRow) {
  const auto tokens = make_docs({4, 3, 11, 3});
  Documents docs;
  docs.add(tokens, kEos);
  Batch b = empty_batch(6, 8);
  PackCursor cur;
  for (int r = 0; r < 6; ++r) pack_row(docs, false, kPad, cur, b, r);
  make_targets(b, kPad, kPad);
  check_invariants(b, kPad);
  EXPECT_EQ(row_of(b.inputs, b, 0), (V{2, 10, 11, 1, 0, 0, 0, 0}));
  EXPECT_EQ(row_of(b.target_segment_ids, b, 0), (V{1, 1, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(row_of(b.inputs, b, 1), (V{2, 20, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(row_of(b.inputs, b, 2), (V{2, 30, 31, 32, 33, 34, 35, 36}));
  EXPECT_EQ(row_of(b.inputs, b, 3), (V{37, 38, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(row_of(b.inputs, b, 4), (V{2, 40, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(row_of(b.inputs, b, 5), row_of(b.inputs, b, 0));
  for (int r = 0; r < 6; ++r)
    for (int32_t s : row_of(b.segment_ids, b, r)) EXPECT_LE(s, 1);
}

TEST(Packing, PadTokenInsideTextIsNotCountedOnlyWhenTheTokenizerHasAPad) {
  const std::vector<uint32_t> tokens = {2, 0, 5, 1, 2, 6, 7, 1};  // id 0 inside a document
  Documents docs;
  docs.add(tokens, kEos);
  Batch b = empty_batch(1, 8);
  PackCursor cur;
  pack_row(docs, true, 0, cur, b, 0);
  make_targets(b, 0, 0);  // MaxText: a target equal to pad is not counted
  EXPECT_EQ(b.target_segment_ids[0], 0);
  make_targets(b, 0, -1);  // no pad id: a real token 0 counts
  EXPECT_EQ(b.target_segment_ids[0], 1);
}

// ---- loaders ----------------------------------------------------------------------------------

std::string write_shard(const TempDir& dir, const std::string& name,
                        const std::vector<std::vector<int32_t>>& docs, int64_t vocab = 259) {
  const std::string path = dir.file(name);
  ShardWriter w(path, vocab, kEos, kBos, kPad);
  for (const auto& d : docs) w.add_document(d, true);
  w.finish();
  return path;
}

std::vector<std::vector<int32_t>> numbered_docs(int n, int len_base, int first_id = 3) {
  std::vector<std::vector<int32_t>> docs;
  int id = first_id;
  for (int d = 0; d < n; ++d) {
    std::vector<int32_t> doc;
    for (int i = 0; i < len_base + (d * 7) % 23; ++i) doc.push_back(id++ % 250 + 3);
    docs.push_back(doc);
  }
  return docs;
}

DataOptions shard_options(const std::string& path, int64_t batch, int64_t seq) {
  DataOptions o;
  o.dataset_type = "shards";
  o.dataset_path = path;
  o.batch = batch;
  o.seq = seq;
  o.vocab_size = 259;
  return o;
}

void expect_same_batch(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.batch, b.batch);
  EXPECT_EQ(a.seq, b.seq);
  EXPECT_EQ(a.inputs, b.inputs);
  EXPECT_EQ(a.targets, b.targets);
  EXPECT_EQ(a.positions, b.positions);
  EXPECT_EQ(a.segment_ids, b.segment_ids);
  EXPECT_EQ(a.target_segment_ids, b.target_segment_ids);
}

TEST(ShardsLoader, PacksTheShardInOrder) {
  TempDir dir;
  const std::string path =
      write_shard(dir, "a.bin", {{10, 11}, {20}, {30, 31, 32, 33, 34, 35, 36, 37, 38}});
  auto l = make_data_loader(shard_options(path, 2, 8));
  const Batch b = l->next();
  check_invariants(b, kPad);
  EXPECT_EQ(row_of(b.inputs, b, 0), (V{2, 10, 11, 1, 2, 20, 1, 0}));
  EXPECT_EQ(row_of(b.inputs, b, 1), (V{2, 30, 31, 32, 33, 34, 35, 36}));
  const Batch c = l->next();
  // The rest of C, then (wrapped) A; B (3 tokens) does not fit the last column.
  EXPECT_EQ(row_of(c.inputs, c, 0), (V{37, 38, 1, 2, 10, 11, 1, 0}));
  EXPECT_EQ(row_of(c.inputs, c, 1), (V{2, 20, 1, 0, 0, 0, 0, 0}));  // C (8) does not fit after B
  EXPECT_NE(l->describe().find("3 documents"), std::string::npos) << l->describe();
}

TEST(ShardsLoader, FolderIsSortedAndListsConcatenate) {
  TempDir dir;
  std::filesystem::create_directory(dir.path / "set");
  write_shard(dir, "set/b.bin", {{50, 51, 52, 53, 54, 55, 56, 57}});
  write_shard(dir, "set/a.bin", {{40, 41, 42, 43, 44, 45, 46, 47}});
  testing::write_file(dir.file("set/notes.txt"), "ignored");
  auto l = make_data_loader(shard_options(dir.file("set"), 2, 10));
  Batch b = l->next();
  EXPECT_EQ(b.inputs[1], 40);
  EXPECT_EQ(b.inputs[11], 50);
  // A comma-separated list keeps the given order.
  l = make_data_loader(shard_options(dir.file("set/b.bin") + ", " + dir.file("set/a.bin"), 2, 10));
  b = l->next();
  EXPECT_EQ(b.inputs[1], 50);
  EXPECT_EQ(b.inputs[11], 40);
}

TEST(ShardsLoader, Errors) {
  TempDir dir;
  const std::string small = write_shard(dir, "small.bin", {{10, 11, 12}});  // 5 tokens
  expect_error([&] { make_data_loader(shard_options(small, 1, 5)); },
               {"small.bin", "5 tokens", "max_target_length + 1 = 6", "lower max_target_length"});
  EXPECT_NO_THROW(make_data_loader(shard_options(small, 1, 4)));
  expect_error([&] { make_data_loader(shard_options("", 1, 4)); }, {"dataset_path"});
  expect_error([&] { make_data_loader(shard_options(dir.file("none.bin"), 1, 4)); },
               {"none.bin", "does not exist"});
  std::filesystem::create_directory(dir.path / "empty");
  expect_error([&] { make_data_loader(shard_options(dir.file("empty"), 1, 4)); },
               {"empty", "no *.bin"});
  const std::string big = write_shard(dir, "big.bin", {{10, 11}, {12, 300, 13}}, 1000);
  expect_error(
      [&] { make_data_loader(shard_options(big, 1, 4)); },
      {"big.bin", "token 6", "id 300", "vocab_size 259", "vocabulary size 1000", "re-tokenize"});
  const std::string other = dir.file("other.bin");
  {
    ShardWriter w(other, 259, 1, -1, -1);
    std::vector<int32_t> d = {5, 6, 7, 8};
    w.add_document(d, true);
    w.finish();
  }
  expect_error([&] { make_data_loader(shard_options(small + "," + other, 1, 4)); },
               {"different tokenizers"});
  DataOptions o = shard_options(small, 1, 4);
  o.dataset_type = "builtin";
  expect_error([&] { make_data_loader(o); }, {"dataset_path", "dataset_type=shards"});
  o.dataset_type = "tfds";
  o.dataset_path = "";
  expect_error([&] { make_data_loader(o); },
               {"dataset_type 'tfds'", "builtin, shards, hf or synthetic"});
  const std::string empty = write_shard(dir, "empty.bin", {});
  expect_error([&] { make_data_loader(shard_options(empty, 1, 4)); },
               {"empty.bin", "no documents"});
  o = shard_options(small, 1, 0);
  expect_error([&] { make_data_loader(o); }, {"max_target_length"});
}

// A restored loader continues with exactly the batches the original would have produced.
void check_resume(const DataOptions& o, int before, int after) {
  auto a = make_data_loader(o);
  for (int i = 0; i < before; ++i) a->next();
  const std::string saved = a->state().dump();
  std::vector<Batch> want;
  for (int i = 0; i < after; ++i) want.push_back(a->next());
  auto b = make_data_loader(o);
  b->next();  // a different position before restoring
  b->restore(nlohmann::json::parse(saved));
  for (int i = 0; i < after; ++i) expect_same_batch(b->next(), want[i]);
  EXPECT_EQ(a->state(), b->state());
}

TEST(Loader, StateRestoreMidEpochAndAcrossWrap) {
  TempDir dir;
  const std::string path =
      write_shard(dir, "a.bin", numbered_docs(12, 3));  // ~190 tokens, docs up to 26
  for (bool packing : {true, false}) {
    DataOptions o = shard_options(path, 2, 16);
    o.packing = packing;
    check_resume(o, 1, 3);   // mid epoch
    check_resume(o, 3, 12);  // crosses several wraps
    auto l = make_data_loader(o);
    for (int i = 0; i < 10; ++i) l->next();
    EXPECT_GE(l->state()["epoch"].get<int>(), 1);
  }
}

TEST(Loader, RestoreRejectsOtherData) {
  TempDir dir;
  auto a = make_data_loader(shard_options(write_shard(dir, "a.bin", numbered_docs(4, 5)), 1, 8));
  auto b = make_data_loader(shard_options(write_shard(dir, "b.bin", numbered_docs(5, 5)), 1, 8));
  expect_error([&] { b->restore(a->state()); }, {"num_documents", "saved state", "dataset_path"});
  DataOptions s;
  s.dataset_type = "synthetic";
  s.seq = 8;
  s.vocab_size = 259;
  auto syn = make_data_loader(s);
  expect_error([&] { syn->restore(a->state()); }, {"type", "synthetic"});
  expect_error(
      [&] {
        a->restore(nlohmann::json{{"type", "shards"}});
      },
      {"num_documents", "missing"});
}

TEST(Loader, SyntheticIsTheSameBatchEveryStep) {
  DataOptions o;
  o.dataset_type = "synthetic";
  o.batch = 3;
  o.seq = 32;
  o.vocab_size = 50;
  o.seed = 7;
  auto l = make_data_loader(o);
  const Batch b = l->next();
  for (int i = 0; i < 3; ++i) expect_same_batch(l->next(), b);
  std::set<int32_t> seen;
  for (int64_t r = 0; r < b.batch; ++r)
    for (int64_t c = 0; c < b.seq; ++c) {
      const int64_t i = r * b.seq + c;
      EXPECT_TRUE(b.inputs[i] >= 0 && b.inputs[i] < 50);
      EXPECT_TRUE(b.targets[i] >= 0 && b.targets[i] < 50);
      EXPECT_EQ(b.positions[i], c);
      EXPECT_EQ(b.segment_ids[i], 1);
      EXPECT_EQ(b.target_segment_ids[i], 1);
      if (c + 1 < b.seq) EXPECT_EQ(b.targets[i], b.inputs[i + 1]);
      seen.insert(b.inputs[i]);
    }
  EXPECT_GT(seen.size(), 30u);
  EXPECT_EQ(b.num_target_tokens(), 3 * 32);
  // Same seed, same batch; another seed, another batch.
  expect_same_batch(make_data_loader(o)->next(), b);
  o.seed = 8;
  EXPECT_NE(make_data_loader(o)->next().inputs, b.inputs);
  check_resume(o, 2, 2);
}

TEST(BuiltinCorpus, DeterministicVariedAndSized) {
  const auto a = builtin_corpus(0), b = builtin_corpus(0), c = builtin_corpus(1);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  size_t bytes = 0, shorter = 0, longer = 0;
  std::string all;
  for (const auto& d : a) {
    bytes += d.size();
    shorter += d.size() < 256;
    longer += d.size() > 512;
    for (char ch : d) ASSERT_TRUE((ch >= 32 && ch < 127) || ch == '\n') << int(ch);
    all += d;
    all += '\x01';
  }
  EXPECT_GE(bytes, kBuiltinCorpusBytes);
  EXPECT_LT(bytes, kBuiltinCorpusBytes + 4096);
  EXPECT_GT(a.size(), 1000u);
  EXPECT_GT(shorter, a.size() / 4);
  EXPECT_GT(longer, a.size() / 20);
  for (const char* s : {"Once upon a time", " plus ", " = ", "Shopping list:", "Q: ", "Count",
                        "\"Hello, ", "Dear diary", " says ", "The opposite of"})
    EXPECT_NE(all.find(s), std::string::npos) << s;
  EXPECT_EQ(builtin_corpus(3, 1000).size(), builtin_corpus(3, 1000).size());
}

TEST(Loader, BuiltinDefaults) {
  DataOptions o;  // builtin, byte tokenizer, packing
  o.batch = 8;
  o.seq = 256;
  o.vocab_size = 259;
  auto l = make_data_loader(o);
  const Batch b = l->next();
  check_invariants(b, kPad);
  EXPECT_EQ(b.inputs[0], kBos);
  for (int32_t t : b.inputs) EXPECT_TRUE(t >= 0 && t < 259);
  EXPECT_GT(b.num_target_tokens(), 8 * 256 * 8 / 10);  // packing leaves little padding
  EXPECT_NE(l->describe().find("built-in corpus"), std::string::npos);
  check_resume(o, 2, 3);
  o.vocab_size = 100;  // the text's bytes map to ids up to 129
  expect_error([&] { make_data_loader(o); }, {"built-in corpus", "byte", "vocab_size 100"});
}

// ---- MaxText's grain pipeline: window shuffle and first-fit packing ----------------------------

// Values printed by grain 0.2 (grain.experimental.index_shuffle / WindowShuffleIterDataset /
// FirstFitPackIterDataset, the versions MaxText 0.2.5 installs).
TEST(GrainShuffle, IndexShuffleMatchesGrain) {
  struct Case {
    uint32_t seed;
    uint64_t max_index;
    std::vector<uint64_t> first;
  };
  const Case cases[] = {
      {0, 99, {49, 83, 10, 87, 39, 69, 95, 9, 62, 20, 54, 7}},
      {1, 99, {35, 7, 50, 32, 73, 40, 44, 80, 68, 23, 52, 69}},
      {12345, 9, {0, 4, 7, 8, 3, 6, 9, 5, 1, 2}},
      {7, 70000, {69573, 40007, 9544, 58333, 3612, 59884, 15894, 54423, 57437, 9897, 32594, 58975}},
  };
  for (const Case& c : cases)
    for (size_t i = 0; i < c.first.size(); ++i)
      EXPECT_EQ(grain_index_shuffle(i, c.max_index, c.seed), c.first[i])
          << "seed " << c.seed << " max_index " << c.max_index << " index " << i;
  // A permutation: every index once.
  std::set<uint64_t> seen;
  for (uint64_t i = 0; i <= 1000; ++i) seen.insert(grain_index_shuffle(i, 1000, 42));
  EXPECT_EQ(seen.size(), 1001u);
  EXPECT_EQ(*seen.rbegin(), 1000u);
}

TEST(GrainShuffle, WindowOrderMatchesGrain) {
  // grain: MapDataset.source(range(7)).repeat(3), WindowShuffleIterDataset(window_size=5, seed=3):
  // its four whole windows (the fifth holds the stream's one last document there; gemmax's stream
  // has no end).
  const std::vector<uint64_t> want = {2, 1, 0, 3, 4, 0, 1, 2, 5, 6, 4, 6, 5, 3, 0, 2, 4, 1, 5, 3};
  const WindowShuffle order(7, 5, 3);
  for (uint64_t p = 0; p < want.size(); ++p) EXPECT_EQ(order.document(p), want[p]) << p;
  // Over whole windows covering whole epochs, every document appears once per epoch.
  std::map<uint64_t, int> count;
  for (uint64_t p = 0; p < 35; ++p) ++count[order.document(p)];
  for (uint64_t d = 0; d < 7; ++d) EXPECT_EQ(count[d], 5) << d;
  // No shuffle: in order, epoch after epoch.
  const WindowShuffle plain(7, 0, 3);
  for (uint64_t p = 0; p < 21; ++p) EXPECT_EQ(plain.document(p), p % 7);
}

TEST(GrainShuffle, SeedsGiveDifferentOrdersTheSameSeedTheSameOrder) {
  const WindowShuffle a(1000, 100, 0), b(1000, 100, 1), again(1000, 100, 0);
  int differ = 0;
  std::set<uint64_t> epoch;
  for (uint64_t p = 0; p < 1000; ++p) {
    differ += a.document(p) != b.document(p);
    EXPECT_EQ(a.document(p), again.document(p));
    epoch.insert(a.document(p));
  }
  EXPECT_GT(differ, 900);
  EXPECT_EQ(epoch.size(), 1000u);  // window | documents: each epoch is a permutation
  // Each window stays within its documents (a window shuffle, not a global one).
  for (uint64_t p = 0; p < 1000; ++p) EXPECT_EQ(a.document(p) / 100, p / 100);
}

// Documents of the given lengths, token i of document d = 100 + 10 d + i, the last one eos.
Documents docs_of_lengths(const std::vector<int>& lengths, std::vector<uint32_t>& storage) {
  storage.clear();
  for (size_t d = 0; d < lengths.size(); ++d) {
    for (int i = 0; i + 1 < lengths[d]; ++i) storage.push_back(uint32_t(100 + 10 * d + i));
    storage.push_back(kEos);
  }
  Documents docs;
  docs.add(storage, kEos);
  return docs;
}

// The row expected from documents placed in order (each whole), padded.
V row_from(const std::vector<int>& lengths, std::vector<int> placed, int64_t S, V* segments,
           V* positions) {
  V row;
  segments->clear(), positions->clear();
  int segment = 0;
  for (int d : placed) {
    ++segment;
    for (int i = 0; i < lengths[size_t(d)]; ++i) {
      row.push_back(i + 1 < lengths[size_t(d)] ? 100 + 10 * d + i : kEos);
      segments->push_back(segment), positions->push_back(i);
    }
  }
  while (int64_t(row.size()) < S) row.push_back(kPad), segments->push_back(0), positions->push_back(0);
  return row;
}

TEST(FirstFit, MatchesGrain) {
  // grain.experimental.FirstFitPackIterDataset(length_struct={"inputs": 8}, num_packing_bins=3,
  // shuffle_bins=False) on documents of these lengths packs rows of documents
  // [0 1] [2 4 5] [3], then [6 7] [8] [9 10] (document 6 fits no row of the first batch).
  const std::vector<int> lengths = {3, 5, 2, 8, 1, 4, 6, 2, 7, 3, 3};
  std::vector<uint32_t> storage;
  const Documents docs = docs_of_lengths(lengths, storage);
  const WindowShuffle order(docs.size(), 0, 0);
  const std::vector<std::vector<std::vector<int>>> want = {{{0, 1}, {2, 4, 5}, {3}},
                                                           {{6, 7}, {8}, {9, 10}}};
  StreamCursor cur;
  for (const auto& batch : want) {
    Batch b = empty_batch(3, 8);
    pack_first_fit(docs, order, {3, true, kPad}, cur, 0, b);
    make_targets(b, kPad, kPad);
    check_invariants(b, kPad);
    for (int64_t r = 0; r < 3; ++r) {
      V seg, pos;
      EXPECT_EQ(row_of(b.inputs, b, r), row_from(lengths, batch[size_t(r)], 8, &seg, &pos)) << r;
      EXPECT_EQ(row_of(b.segment_ids, b, r), seg) << r;
      EXPECT_EQ(row_of(b.positions, b, r), pos) << r;
    }
  }
  EXPECT_EQ(cur, (StreamCursor{11, 0}));
}

TEST(FirstFit, FirstRowWithRoomEveryTokenOnceAndTheNextBatchFitsNoRow) {
  std::vector<int> lengths;
  for (int d = 0; d < 97; ++d) lengths.push_back(1 + (d * 37 + 11) % 29);  // 1 .. 29 tokens
  std::vector<uint32_t> storage;
  const Documents docs = docs_of_lengths(lengths, storage);
  for (bool shuffle : {false, true}) {
    const WindowShuffle order(docs.size(), shuffle ? 10 : 0, 5);
    const int64_t S = 32, bins = 4;
    StreamCursor cur;
    std::map<int32_t, int> emitted;  // token -> times seen
    for (int step = 0; step < 40; ++step) {
      Batch b = empty_batch(bins, S);
      const StreamCursor before = cur;
      pack_first_fit(docs, order, {bins, true, kPad}, cur, 0, b);
      make_targets(b, kPad, kPad);
      check_invariants(b, kPad);
      // The batch's documents, in stream order: each is in the first row that had room for it
      // when it came, right after what that row held.
      std::vector<int64_t> used(size_t(bins), 0);
      for (uint64_t p = before.position; p < cur.position; ++p) {
        const uint64_t d = order.document(p);
        const int64_t len = lengths[size_t(d)];
        const int64_t row = std::find_if(used.begin(), used.end(),
                                         [&](int64_t u) { return u + len <= S; }) -
                            used.begin();
        ASSERT_LT(row, bins) << step;
        EXPECT_EQ(b.inputs[size_t(row * S + used[size_t(row)])], int32_t(docs[d][0])) << step;
        EXPECT_EQ(b.positions[size_t(row * S + used[size_t(row)])], 0) << step;
        used[size_t(row)] += len;
      }
      for (int64_t r = 0; r < bins; ++r) {
        int64_t filled = 0;
        for (int64_t c = 0; c < S; ++c) filled += b.segment_ids[size_t(r * S + c)] != 0;
        EXPECT_EQ(filled, used[size_t(r)]) << step << " " << r;
      }
      for (int64_t i = 0; i < b.tokens(); ++i)
        if (b.segment_ids[size_t(i)] != 0) ++emitted[b.inputs[size_t(i)]];
      // The document that opens the next batch fits no row of this one.
      const int64_t next = lengths[size_t(order.document(cur.position))];
      for (int64_t r = 0; r < bins; ++r) EXPECT_GT(next + used[size_t(r)], S) << step << " " << r;
    }
    // Every token of the stream up to the cursor was emitted as often as the stream holds it.
    std::map<int32_t, int> stream;
    for (uint64_t p = 0; p < cur.position; ++p) {
      const uint64_t d = order.document(p);
      for (uint32_t t : docs[d])
        if (t != uint32_t(kEos)) ++stream[int32_t(t)];
    }
    emitted.erase(kEos);
    EXPECT_EQ(emitted, stream) << "shuffle " << shuffle;
  }
}

TEST(FirstFit, TruncationDropsTheRestPiecesOtherwise) {
  const std::vector<int> lengths = {12, 3};
  std::vector<uint32_t> storage;
  const Documents docs = docs_of_lengths(lengths, storage);
  const WindowShuffle order(docs.size(), 0, 0);
  StreamCursor cur;
  Batch b = empty_batch(2, 8);
  pack_first_fit(docs, order, {2, true, kPad}, cur, 0, b);
  // Truncated: document 0 keeps 8 tokens (no eos), document 1 goes to row 1.
  EXPECT_EQ(row_of(b.inputs, b, 0), (V{100, 101, 102, 103, 104, 105, 106, 107}));
  EXPECT_EQ(row_of(b.inputs, b, 1), (V{110, 111, kEos, 0, 0, 0, 0, 0}));
  cur = {};
  b = empty_batch(2, 8);
  pack_first_fit(docs, order, {2, false, kPad}, cur, 0, b);
  // Pieces: document 0's rest (4 tokens, positions from 0) joins row 1; document 1 fits after it.
  EXPECT_EQ(row_of(b.inputs, b, 1), (V{108, 109, 110, kEos, 110, 111, kEos, 0}));
  EXPECT_EQ(row_of(b.positions, b, 1), (V{0, 1, 2, 3, 0, 1, 2, 0}));
  EXPECT_EQ(row_of(b.segment_ids, b, 1), (V{1, 1, 1, 1, 2, 2, 2, 0}));
  // Sequential packing truncates the same way when asked.
  PackCursor pc;
  b = empty_batch(1, 8);
  pack_row(docs, true, kPad, pc, b, 0, true, true);
  EXPECT_EQ(pc, (PackCursor{1, 0, 0}));
}

DataOptions first_fit_options(const std::string& path, int64_t batch, int64_t seq, uint64_t seed) {
  DataOptions o = shard_options(path, batch, seq);
  o.packing_type = "first_fit";
  o.shuffle = true;
  o.shuffle_buffer = 5;
  o.truncate = true;
  o.seed = seed;
  return o;
}

TEST(Loader, FirstFitResumeRanksSeedsAndErrors) {
  TempDir dir;
  const std::string path = write_shard(dir, "a.bin", numbered_docs(23, 3));
  for (bool truncate : {true, false}) {
    DataOptions o = first_fit_options(path, 2, 16, 7);
    o.truncate = truncate;
    check_resume(o, 1, 3);   // mid epoch
    check_resume(o, 4, 12);  // across epochs
  }
  // Two ranks read rows 0-1 and 2-3 of what one rank with four rows reads.
  auto one = make_data_loader(first_fit_options(path, 4, 16, 7));
  DataOptions r0 = first_fit_options(path, 2, 16, 7), r1 = r0;
  r0.ranks = r1.ranks = 2;
  r1.rank = 1;
  auto a = make_data_loader(r0), b = make_data_loader(r1);
  for (int step = 0; step < 6; ++step) {
    const Batch all = one->next(), x = a->next(), y = b->next();
    V joined = x.inputs;
    joined.insert(joined.end(), y.inputs.begin(), y.inputs.end());
    EXPECT_EQ(joined, all.inputs) << step;
    V seg = x.target_segment_ids;
    seg.insert(seg.end(), y.target_segment_ids.begin(), y.target_segment_ids.end());
    EXPECT_EQ(seg, all.target_segment_ids) << step;
  }
  EXPECT_EQ(a->state(), one->state());
  // Seeds: the same seed reads the same batches, another seed others.
  auto s7 = make_data_loader(first_fit_options(path, 2, 16, 7));
  auto s7b = make_data_loader(first_fit_options(path, 2, 16, 7));
  auto s8 = make_data_loader(first_fit_options(path, 2, 16, 8));
  bool differ = false;
  for (int step = 0; step < 4; ++step) {
    const Batch x = s7->next(), y = s8->next();
    expect_same_batch(x, s7b->next());
    differ = differ || x.inputs != y.inputs;
  }
  EXPECT_TRUE(differ);
  // A state of the other packing, shuffle window or truncation is refused.
  auto seq = make_data_loader(shard_options(path, 2, 16));
  expect_error([&] { seq->restore(s7->state()); }, {"first_fit", "grain_packing_type"});
  expect_error([&] { s7->restore(seq->state()); }, {"sequential", "grain_packing_type"});
  DataOptions w = first_fit_options(path, 2, 16, 7);
  w.shuffle_buffer = 6;
  expect_error([&] { make_data_loader(w)->restore(s7->state()); },
               {"shuffle_buffer", "grain_shuffle_buffer_size"});
  // Options the loader refuses.
  DataOptions bad = first_fit_options(path, 2, 16, 7);
  bad.packing_type = "best_fit";
  expect_error([&] { make_data_loader(bad); }, {"best_fit", "not implemented", "first_fit"});
  bad = first_fit_options(path, 2, 16, 7);
  bad.packing_type = "sequential";
  expect_error([&] { make_data_loader(bad); },
               {"enable_data_shuffling=true", "grain_packing_type=first_fit"});
  // The description says how rows are filled.
  const std::string d = s7->describe();
  EXPECT_NE(d.find("first-fit"), std::string::npos) << d;
  EXPECT_NE(d.find("windows of 5"), std::string::npos) << d;
}

}  // namespace
}  // namespace gemmax
