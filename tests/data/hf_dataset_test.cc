// Hugging Face datasets on disk (dataset_type=hf): each format (Parquet, Arrow IPC of
// save_to_disk, JSON, JSONL), split resolution against what the `datasets` library itself found
// in the same folders (fixtures/hf/splits.json, written by make_fixtures.py), the same shard as
// the JSONL path of `gemmax tokenize`, training reading the same tokens, and each bad input's
// error. Parquet and Arrow need the Arrow module; a build without it checks the error instead.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "gemmax/data/arrow_reader.h"
#include "gemmax/data/hf_dataset.h"
#include "gemmax/data/loader.h"
#include "gemmax/data/tokenize_files.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::expect_error;
using testing::TempDir;

const std::string kFixtures = std::string(GEMMAX_SOURCE_DIR) + "/tests/data/fixtures/hf";
const std::string kTemplate =
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>\n{% endfor %}";

#define REQUIRE_ARROW()                                                                   \
  if (!GEMMAX_ARROW_MODULE_BUILT) GTEST_SKIP() << "built without Arrow (GEMMAX_ARROW=OFF): " \
                                                  "NoArrowBuild.SaysHowToGetIt covers it"

uint64_t count_rows(const std::vector<std::string>& files, const std::vector<std::string>& cols) {
  uint64_t n = 0;
  for (const std::string& f : files) for_each_hf_row(f, cols, [&](const auto&, const auto&) { ++n; });
  return n;
}

TEST(HfDataset, SplitsAreTheOnesTheDatasetsLibraryFinds) {
  REQUIRE_ARROW();
  std::ifstream in(kFixtures + "/splits.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  ASSERT_GE(expected.size(), 7u);
  for (const auto& [name, splits] : expected.items()) {
    const size_t slash = name.find('/');
    const std::string path = kFixtures + "/" + name.substr(0, slash);
    const std::string data_dir = slash == std::string::npos ? "" : name.substr(slash + 1);
    const std::vector<std::string> found = hf_splits(path, data_dir);
    std::set<std::string> want;
    for (const auto& [split, _] : splits.items()) want.insert(split);
    EXPECT_EQ(std::set<std::string>(found.begin(), found.end()), want) << name;
    const std::vector<std::string> cols = name == "chat" || name == "saved_one"
                                              ? std::vector<std::string>{"messages"}
                                              : std::vector<std::string>{"text"};
    for (const auto& [split, rows] : splits.items()) {
      const auto files = hf_split_files({path, data_dir, "", split});
      EXPECT_EQ(count_rows(files, cols), rows.get<uint64_t>()) << name << " split " << split;
    }
  }
}

TEST(HfDataset, RowsHoldTheColumnsAskedForInThatOrder) {
  REQUIRE_ARROW();
  std::vector<nlohmann::ordered_json> rows;
  for_each_hf_row(kFixtures + "/chat/data/train_sft-00000-of-00001.parquet", {"messages", "prompt"},
                  [&](const nlohmann::ordered_json& r, const std::string& where) {
                    EXPECT_NE(where.find("train_sft-00000-of-00001.parquet: row "), std::string::npos);
                    rows.push_back(r);
                  });
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].dump(),
            R"({"messages":[{"content":"What is 2 + 2?","role":"user"},{"content":"4.","role":"assistant"}],"prompt":"What is 2 + 2?"})");
  // The same rows from save_to_disk's Arrow stream file.
  std::vector<nlohmann::ordered_json> saved;
  for (const auto& f : hf_split_files({kFixtures + "/saved_one", "", "", "train"}))
    for_each_hf_row(f, {"messages", "prompt"}, [&](const auto& r, const auto&) { saved.push_back(r); });
  EXPECT_EQ(saved, rows);
}

TEST(HfDataset, JsonFilesNeedNoArrow) {
  const auto train = hf_split_files({kFixtures + "/json_named", "", "", "train"});
  ASSERT_EQ(train.size(), 1u);
  EXPECT_NE(train[0].find("train.jsonl"), std::string::npos);
  const auto dev = hf_split_files({kFixtures + "/json_named", "", "", "validation"});
  ASSERT_EQ(dev.size(), 1u);
  EXPECT_NE(dev[0].find("dev.json"), std::string::npos) << "dev names the validation split";
  std::vector<std::string> texts;
  for_each_hf_row(dev[0], {"text"}, [&](const auto& r, const auto&) {
    EXPECT_EQ(r.size(), 1u) << "only the columns asked for";
    texts.push_back(r["text"]);
  });
  EXPECT_EQ(texts, (std::vector<std::string>{"Held-out text for evaluation.",
                                             "A second held-out document, a bit longer."}));
}

TokenizeOptions base_options(const std::string& out) {
  TokenizeOptions o;
  o.out = out;
  o.chat_template = kTemplate;
  return o;
}

// Each dataset form, tokenized through the dataset path, writes the shard the JSONL path writes.
TEST(HfDataset, SameShardAsTheJsonlPath) {
  REQUIRE_ARROW();
  TempDir dir;
  struct Case {
    std::string jsonl;
    TokenizeOptions hf;
  };
  std::vector<Case> cases;
  auto add = [&](const std::string& jsonl, auto set) {
    TokenizeOptions o = base_options(dir / ("hf" + std::to_string(cases.size()) + ".bin"));
    set(o);
    cases.push_back({jsonl, o});
  };
  add("text_train.jsonl", [](TokenizeOptions& o) { o.hf_path = kFixtures + "/text"; });
  add("text_train.jsonl", [](TokenizeOptions& o) {
    o.hf_path = kFixtures + "/saved_dict";
    o.data_columns = {"text"};
  });
  add("text_train.jsonl", [](TokenizeOptions& o) {
    o.hf_path = kFixtures + "/configs";
    o.hf_data_dir = "default";
  });
  add("text_train.jsonl", [](TokenizeOptions& o) { o.hf_path = kFixtures + "/json_named"; });
  add("text_train.jsonl", [](TokenizeOptions& o) { o.hf_path = kFixtures + "/unnamed"; });
  add("chat_train.jsonl", [](TokenizeOptions& o) {
    o.hf_path = kFixtures + "/chat";
    o.split = "train_sft";
    o.data_columns = {"messages"};
  });
  add("chat_train.jsonl", [](TokenizeOptions& o) {
    o.hf_path = kFixtures + "/saved_one";
    o.data_columns = {"messages"};
  });
  add("pairs.jsonl", [](TokenizeOptions& o) {
    o.inputs = {kFixtures + "/pairs.parquet"};
    o.data_columns = {"completion", "prompt"};
  });
  for (size_t k = 0; k < cases.size(); ++k) {
    TokenizeOptions ref = base_options(dir / ("ref" + std::to_string(k) + ".bin"));
    ref.inputs = {kFixtures + "/" + cases[k].jsonl};
    const TokenizeResult a = tokenize_files(ref), b = tokenize_files(cases[k].hf);
    EXPECT_GT(a.tokens, 20u);
    EXPECT_EQ(a.documents, b.documents) << k;
    EXPECT_EQ(a.conversations + a.pairs, b.conversations + b.pairs) << k;
    EXPECT_EQ(testing::read_file(ref.out), testing::read_file(cases[k].hf.out))
        << "case " << k << " (" << cases[k].jsonl << ")";
  }
}

// Training with dataset_type=hf reads the batches a run over the tokenized shard reads.
TEST(HfDataset, TrainingReadsTheTokensOfGemmaxTokenize) {
  REQUIRE_ARROW();
  TempDir dir;
  TokenizeOptions t = base_options(dir / "chat.bin");
  t.inputs = {kFixtures + "/chat_train.jsonl"};
  tokenize_files(t);
  DataOptions shards;
  shards.dataset_type = "shards";
  shards.dataset_path = t.out;
  shards.seq = 16;
  shards.batch = 2;
  shards.vocab_size = 259;
  shards.packing_type = "first_fit";  // a run's default packing; unshuffled, as the HF order
  shards.shuffle = false;             // differs from grain's (hf_order_test.cc)
  shards.seed = 7;
  shards.completion_only = true;
  DataOptions hf = shards;
  hf.dataset_type = "hf";
  hf.dataset_path = "";
  hf.hf_path = kFixtures + "/chat";
  hf.hf_split = "train_sft";
  hf.data_columns = "messages";
  hf.chat_template = kTemplate;
  auto a = make_data_loader(shards), b = make_data_loader(hf);
  EXPECT_NE(b->describe().find("3 conversations"), std::string::npos) << b->describe();
  for (int step = 0; step < 6; ++step) {
    const Batch x = a->next(), y = b->next();
    EXPECT_EQ(x.inputs, y.inputs) << step;
    EXPECT_EQ(x.targets, y.targets) << step;
    EXPECT_EQ(x.target_segment_ids, y.target_segment_ids) << step;
  }
  // The eval split, one pass.
  hf.eval = true;
  hf.hf_split = "test_sft";
  hf.batch = 1;
  hf.seq = 8;
  auto e = make_data_loader(hf);
  EXPECT_NE(e->describe().find("1 conversations"), std::string::npos) << e->describe();
  // A dataset named for another dataset_type.
  DataOptions builtin = shards;
  builtin.dataset_type = "builtin";
  builtin.dataset_path = "";
  builtin.completion_only = false;
  builtin.hf_path = hf.hf_path;
  expect_error([&] { make_data_loader(builtin); },
               {"hf_path '", "dataset_type is 'builtin'", "dataset_type=hf"});
  // A tokenizer whose ids the model's vocabulary does not hold: named by the dataset.
  hf.vocab_size = 100;
  expect_error([&] { make_data_loader(hf); },
               {"Hugging Face dataset's split test_sft", "tokenized with byte (vocab 259)",
                "outside the model's vocabulary (vocab_size 100)"});
}

TEST(HfDataset, BadInputsSayWhatAndHowToFixIt) {
  TempDir dir;
  auto tokenize = [&](auto set) {
    TokenizeOptions o = base_options(dir / "out.bin");
    set(o);
    tokenize_files(o);
  };
  // A folder with no file for the split: the splits it has.
  expect_error([&] { hf_split_files({kFixtures + "/json_named", "", "", "test"}); },
               {"train_split=test", "json_named", "no data file for split 'test'",
                "train (1 file), validation (1 file)", "hf_data_dir", "hf_train_files"});
  expect_error([&] { hf_split_files({kFixtures + "/nothing_here", "", "", "train"}); },
               {"hf_path", "nothing_here", "not a folder", "huggingface-cli download"});
  expect_error([&] { hf_split_files({"", "", kFixtures + "/json_named/*.parquet", "train"}); },
               {"hf_train_files", "matches no"});
  // JSON rows: a missing column, a column that is not text, messages that are not a list.
  expect_error([&] { tokenize([](auto& o) { o.hf_path = kFixtures + "/json_named"; o.data_columns = {"body"}; }); },
               {"train.jsonl:1", "no column \"body\"", "its columns: text, id", "train_data_columns"});
  expect_error([&] { tokenize([](auto& o) { o.hf_path = kFixtures + "/json_named"; o.data_columns = {"id"}; }); },
               {"train.jsonl:1", "column \"id\" is number", "expected text"});
  expect_error([&] { tokenize([](auto& o) { o.hf_path = kFixtures + "/json_named"; o.data_columns = {"text", "id"}; }); },
               {"data columns [text, id]", "one text column", "prompt"});
  expect_error([&] { tokenize([](auto& o) { o.hf_path = kFixtures + "/json_named"; o.data_columns = {"messages"}; }); },
               {"train.jsonl:1", "no column \"messages\""});
  EXPECT_FALSE(std::filesystem::exists(dir / "out.bin")) << "nothing half-written";
  if (!GEMMAX_ARROW_MODULE_BUILT) return;
  // Parquet: truncated, missing column, not text, messages as strings, binary.
  expect_error([&] { tokenize([](auto& o) { o.inputs = {kFixtures + "/bad/truncated.parquet"}; }); },
               {"Parquet file", "bad/truncated.parquet", "truncated or not Parquet"});
  expect_error([&] { tokenize([](auto& o) { o.hf_path = kFixtures + "/text"; o.data_columns = {"body"}; }); },
               {"train-00000-of-00001.parquet", "no column \"body\"", "its columns: text, id",
                "train_data_columns"});
  expect_error([&] { tokenize([](auto& o) { o.hf_path = kFixtures + "/text"; o.data_columns = {"id"}; }); },
               {"train-00000-of-00001.parquet: row 1", "column \"id\" is int64", "expected text"});
  expect_error([&] { tokenize([](auto& o) { o.inputs = {kFixtures + "/bad/messages_text.parquet"}; o.data_columns = {"messages"}; }); },
               {"messages_text.parquet: row 1", "column \"messages\" is string",
                "list of {\"role\", \"content\"} turns"});
  expect_error([&] { tokenize([](auto& o) { o.inputs = {kFixtures + "/bad/binary.parquet"}; }); },
               {"binary.parquet: row 1", "column \"text\" is binary", "expected text"});
  expect_error([&] { tokenize([](auto& o) { o.hf_path = kFixtures + "/chat"; o.split = "train"; }); },
               {"train_split=train", "train_sft (1 file)", "test_sft (1 file)"});
  EXPECT_FALSE(std::filesystem::exists(dir / "out.bin")) << "nothing half-written";
}

TEST(NoArrowBuild, SaysHowToGetIt) {
  if (GEMMAX_ARROW_MODULE_BUILT) {
    EXPECT_NE(arrow_module_status().find("Apache Arrow 18.1.0"), std::string::npos)
        << arrow_module_status();
    return;
  }
  expect_error([&] { read_arrow_rows(kFixtures + "/pairs.parquet", ArrowFormat::Parquet, {"prompt"}, [](auto) {}); },
               {"pairs.parquet", "without Apache Arrow", "-DGEMMAX_ARROW=ON", "GEMMAX_ARROW_ROOT"});
}

}  // namespace
}  // namespace gemmax
