// tokenizer.json against the `tokenizers` library: the ids and decoded text it gave for the
// documents of tests/data/fixtures/tokenizer_json (made by make_fixtures.py there), the factory
// that reads the kind from the file, and the errors for bad files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gemmax/data/hf_tokenizer.h"
#include "gemmax/data/loader.h"
#include "gemmax/data/token_shard.h"
#include "gemmax/data/tokenize_files.h"
#include "gemmax/data/tokenizer.h"
#include "test_util.h"

namespace gemmax {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;
using testing::TempDir;

const std::string kFixtures =
    std::string(GEMMAX_SOURCE_DIR) + "/tests/data/fixtures/tokenizer_json";

std::vector<std::string> fixture_docs() {
  std::vector<std::string> docs;
  std::ifstream in(kFixtures + "/docs.jsonl");
  for (std::string line; std::getline(in, line);)
    docs.push_back(nlohmann::json::parse(line).get<std::string>());
  return docs;
}

std::vector<nlohmann::json> expected_rows(const std::string& name) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(kFixtures + "/" + name + "/expected.jsonl");
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

class LibraryFixture : public ::testing::TestWithParam<const char*> {};

// Every document encodes to the library's ids and decodes to its text (skip_special_tokens);
// the first ones framed by the post-processor as add_special_tokens=True frames them.
TEST_P(LibraryFixture, EncodeAndDecodeAsTheLibrary) {
  const std::string name = GetParam();
  const auto docs = fixture_docs();
  const auto rows = expected_rows(name);
  ASSERT_GE(docs.size(), 3000u);
  ASSERT_GE(rows.size(), 1500u);
  const auto tok = make_tokenizer("auto", kFixtures + "/" + name);
  const auto& hf = dynamic_cast<const hf::HfTokenizer&>(*tok);
  size_t bad_ids = 0, bad_text = 0, framed = 0;
  for (size_t k = 0; k < rows.size(); ++k) {
    const auto want = rows[k]["ids"].get<std::vector<int32_t>>();
    const auto got = tok->encode(docs[k]);
    if (got != want && ++bad_ids <= 5)
      ADD_FAILURE() << name << " document " << k << " " << nlohmann::json(docs[k]).dump()
                    << "\n  library " << nlohmann::json(want).dump() << "\n  gemmax  "
                    << nlohmann::json(got).dump();
    const std::string text =
        rows[k].contains("text") ? rows[k]["text"].get<std::string>() : docs[k];
    if (tok->decode(want) != text && ++bad_text <= 5)
      ADD_FAILURE() << name << " document " << k << " decodes to "
                    << nlohmann::json(tok->decode(want)).dump() << ", library "
                    << nlohmann::json(text).dump();
    if (rows[k].contains("framed")) {
      ++framed;
      EXPECT_EQ(hf.encode_with_special_tokens(docs[k]),
                rows[k]["framed"].get<std::vector<int32_t>>())
          << k;
    }
  }
  EXPECT_EQ(bad_ids, 0u);
  EXPECT_EQ(bad_text, 0u);
  EXPECT_EQ(framed, 64u);
}

INSTANTIATE_TEST_SUITE_P(TokenizerJson, LibraryFixture,
                         ::testing::Values("gemma", "split_nfkc", "metaspace"));

// Split with regexes whose classes Oniguruma (the library's engine) reads unlike PCRE2: every
// behavior, inverted or not, gives the library's pieces.
TEST(TokenizerJson, RegexSplitsAsOniguruma) {
  std::ifstream in(kFixtures + "/regex_splits.jsonl");
  size_t rows = 0, bad = 0;
  for (std::string line; std::getline(in, line); ++rows) {
    const auto row = nlohmann::json::parse(line);
    std::string behavior;
    for (const std::string part :
         {"removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"})
      if (row["behavior"] == part) behavior = part;
    // The JSON names: Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous.
    std::string name;
    bool upper = true;
    for (char ch : behavior) {
      if (ch == '_') {
        upper = true;
        continue;
      }
      name += upper ? char(std::toupper(ch)) : ch;
      upper = false;
    }
    const nlohmann::json j = {{"type", "Split"},
                              {"pattern", {{"Regex", row["pattern"]}}},
                              {"behavior", name},
                              {"invert", row["invert"]}};
    const auto split = hf::parse_pre_tokenizer(j, {"regex_splits.jsonl", "pre_tokenizer"});
    std::vector<hf::Piece> pieces;
    split->split({row["text"].get<std::string>(), -1, true}, pieces);
    std::vector<std::string> got;
    for (const auto& p : pieces) got.push_back(p.text);
    if (got != row["pieces"].get<std::vector<std::string>>() && ++bad <= 5)
      ADD_FAILURE() << row.dump() << "\n  gemmax " << nlohmann::json(got).dump();
  }
  EXPECT_GT(rows, 500u);
  EXPECT_EQ(bad, 0u);
}

TEST(TokenizerJson, SpecialIdsComeFromTheFolder) {
  const auto gemma = make_tokenizer("huggingface", kFixtures + "/gemma/tokenizer.json");
  EXPECT_EQ(gemma->vocab_size(), 700);
  EXPECT_EQ(gemma->pad_id(), 0);
  EXPECT_EQ(gemma->eos_id(), 1);
  EXPECT_EQ(gemma->bos_id(), 2);
  // A chat turn's marker is one token, never its characters.
  EXPECT_EQ(gemma->encode("<|turn>").size(), 1u);
  EXPECT_EQ(gemma->encode("<start_of_turn>user\nhi<end_of_turn>").front(),
            dynamic_cast<const hf::HfTokenizer&>(*gemma).token_to_id("<start_of_turn>"));
  // split_nfkc's trainer put <bos> at 1 and <eos> at 2; its config gives bos as an object.
  const auto other = make_tokenizer("auto", kFixtures + "/split_nfkc");
  EXPECT_EQ(other->bos_id(), 1);
  EXPECT_EQ(other->eos_id(), 2);
  EXPECT_EQ(other->pad_id(), 3);
  // Without a tokenizer_config.json, bos is the post-processor's and eos is unknown.
  TempDir dir;
  fs::copy_file(kFixtures + "/gemma/tokenizer.json", dir / "tokenizer.json");
  const auto bare = make_tokenizer("auto", dir.str());
  EXPECT_EQ(bare->bos_id(), 2);
  EXPECT_EQ(bare->eos_id(), -1);
}

TEST(TokenizerJson, FactoryReadsTheKindFromTheFile) {
  TempDir dir;
  // A folder with both: tokenizer.json first, as transformers.
  for (const char* f : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json"})
    fs::copy_file(kFixtures + "/gemma/" + f, dir / f);
  EXPECT_NE(make_tokenizer("auto", dir.str())->describe().find("huggingface"), std::string::npos);
  EXPECT_NE(make_tokenizer("", dir / "tokenizer.model")->describe().find("sentencepiece"),
            std::string::npos);
  fs::remove(dir / "tokenizer.json");
  EXPECT_NE(make_tokenizer("sentencepiece", dir.str())->describe().find("sentencepiece"),
            std::string::npos);
  expect_error([&] { make_tokenizer("huggingface", dir.str()); },
               {"tokenizer_type=huggingface", "tokenizer.model", "SentencePiece",
                "tokenizer_type=sentencepiece"});
  expect_error([&] { make_tokenizer("sentencepiece", kFixtures + "/gemma/tokenizer.json"); },
               {"tokenizer_type=sentencepiece", "tokenizer.json", "tokenizer_type=huggingface"});
  fs::remove(dir / "tokenizer.model");
  expect_error([&] { make_tokenizer("auto", dir.str()); },
               {"without tokenizer.json or tokenizer.model"});
  expect_error([&] { make_tokenizer("huggingface", ""); }, {"needs tokenizer_path"});
  expect_error([&] { make_tokenizer("tiktoken", dir.str()); },
               {"tokenizer_type 'tiktoken'", "huggingface"});
  expect_error([&] { make_tokenizer("auto", dir / "none.json"); }, {"none.json", "no such file"});
  // The kind without loading: how a resumed run compares an old checkpoint's explicit kind.
  EXPECT_EQ(tokenizer_kind("auto", ""), "byte");
  EXPECT_EQ(tokenizer_kind("", kFixtures + "/gemma"), "huggingface");
  EXPECT_EQ(tokenizer_kind("auto", kFixtures + "/gemma/tokenizer.model"), "sentencepiece");
  EXPECT_EQ(tokenizer_kind("sentencepiece", kFixtures + "/gemma"), "sentencepiece");
}

// A copy of the Gemma fixture's tokenizer.json with `edit` applied, loaded.
void load_edited(const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(kFixtures + "/gemma/tokenizer.json");
  nlohmann::json j = nlohmann::json::parse(in);
  edit(j);
  TempDir dir;
  testing::write_file(dir / "tokenizer.json", j.dump());
  make_tokenizer("auto", dir / "tokenizer.json");
}

TEST(TokenizerJson, BadFilesAreClearErrors) {
  TempDir dir;
  testing::write_file(dir / "tokenizer.json", "{\"model\": {\"type\": \"BPE\", ");
  expect_error([&] { make_tokenizer("auto", dir / "tokenizer.json"); },
               {"tokenizer.json", "not valid JSON"});
  expect_error([] { load_edited([](nlohmann::json& j) { j.erase("model"); }); },
               {"tokenizer.json", "no \"model\""});
  expect_error(
      [] { load_edited([](nlohmann::json& j) { j["model"]["merges"].push_back("▁the zzz"); }); },
      {"field \"model.merges[", "\"zzz\"", "not in model.vocab"});
  expect_error(
      [] {
        load_edited([](nlohmann::json& j) {
          j["model"]["merges"].push_back(nlohmann::json::array({"a"}));
        });
      },
      {"model.merges[", "expected \"a b\""});
  expect_error(
      [] { load_edited([](nlohmann::json& j) { j["model"]["merges"].push_back("nospace"); }); },
      {"model.merges[", "not two tokens"});
  for (const char* model : {"WordPiece", "Unigram", "WordLevel"})
    expect_error([&] { load_edited([&](nlohmann::json& j) { j["model"]["type"] = model; }); },
                 {"tokenizer.json", "model.type", model, "not supported"});
  expect_error(
      [] {
        load_edited([](nlohmann::json& j) {
          j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
        });
      },
      {"field \"pre_tokenizer\"", "\"ByteLevel\"", "not supported"});
  expect_error(
      [] {
        load_edited([](nlohmann::json& j) {
          j["normalizer"] = {{"type", "Sequence"},
                             {"normalizers", {{{"type", "NFC"}}, {{"type", "Lowercase"}}}}};
        });
      },
      {"field \"normalizer.normalizers[1]\"", "\"Lowercase\"", "not supported"});
  expect_error(
      [] {
        load_edited([](nlohmann::json& j) {
          j["decoder"]["decoders"][1] = {{"type", "ByteLevel"}};
        });
      },
      {"field \"decoder.decoders[1]\"", "\"ByteLevel\"", "not supported"});
  expect_error(
      [] {
        load_edited([](nlohmann::json& j) {
          j["post_processor"] = {{"type", "RobertaProcessing"}};
        });
      },
      {"field \"post_processor\"", "\"RobertaProcessing\"", "not supported"});
  expect_error(
      [] {
        load_edited([](nlohmann::json& j) {
          j["pre_tokenizer"] = {{"type", "Split"},
                                {"pattern", {{"Regex", "(unclosed"}}},
                                {"behavior", "Isolated"},
                                {"invert", false}};
        });
      },
      {"pre_tokenizer.pattern", "does not compile"});
  expect_error(
      [] { load_edited([](nlohmann::json& j) { j["pre_tokenizer"]["behavior"] = "Sideways"; }); },
      {"pre_tokenizer.behavior", "Sideways", "MergedWithNext"});
  expect_error([] { load_edited([](nlohmann::json& j) { j["model"]["dropout"] = 0.1; }); },
               {"model.dropout", "null"});
  expect_error(
      [] { load_edited([](nlohmann::json& j) {
             j["truncation"] = {{"max_length", 8}};
           }); },
      {"field \"truncation\"", "null"});
  expect_error([] { load_edited([](nlohmann::json& j) { j["added_tokens"][0]["id"] = 5; }); },
               {"added_tokens[0]", "\"<pad>\"", "the tokenizers library gives it 0"});
  // The folder's files must agree with the tokenizer.
  for (const char* f : {"tokenizer.json", "tokenizer.model"})
    fs::copy_file(kFixtures + "/gemma/" + f, dir / ("g_" + std::string(f)));
  fs::create_directories(dir / "g");
  fs::copy_file(kFixtures + "/gemma/tokenizer.json", dir / "g/tokenizer.json");
  testing::write_file(dir / "g/tokenizer_config.json", "{\"eos_token\": \"<end>\"}");
  expect_error([&] { make_tokenizer("auto", dir / "g"); },
               {"tokenizer_config.json", "eos_token", "\"<end>\" is not a token"});
  testing::write_file(dir / "g/tokenizer_config.json", "{\"eos_token\": 7}");
  expect_error([&] { make_tokenizer("auto", dir / "g"); },
               {"tokenizer_config.json", "eos_token", "expected a token string"});
  // Text that is not UTF-8 is refused, naming the byte.
  const auto tok = make_tokenizer("auto", kFixtures + "/gemma");
  expect_error([&] { tok->encode("ok \xff"); }, {"not valid UTF-8", "byte 3"});
}

// Decoding is the inverse of encoding for text the vocabulary covers byte by byte; specials
// decode to nothing and ids outside the vocabulary to U+FFFD.
TEST(TokenizerJson, DecodeInverseAndOutOfRange) {
  const auto tok = make_tokenizer("auto", kFixtures + "/gemma");
  for (const std::string text :
       {"Plain prose, with  two spaces.\n\ttab", "日本語 🐈‍⬛ \x01 z\u0301",
        "<start_of_turn>user\nhi<end_of_turn>"})
    EXPECT_EQ(tok->decode(tok->encode(text)), text);
  std::vector<int32_t> ids = {2};
  const auto hi = tok->encode("hi");
  ids.insert(ids.end(), hi.begin(), hi.end());
  ids.push_back(1);
  EXPECT_EQ(tok->decode(ids), "hi");
  ids.push_back(700);
  ids.push_back(-4);
  EXPECT_EQ(tok->decode(ids), "hi\xEF\xBF\xBD\xEF\xBF\xBD");
}

// `gemmax tokenize` gives the same shard through the tokenizer.json and through the
// SentencePiece model it was converted from; and the shard's vocabulary is checked against
// the model's.
TEST(TokenizerJson, SameShardAsTheSentencePieceModel) {
  TempDir dir;
  std::string jsonl;
  size_t n = 0;
  for (const std::string& d : fixture_docs()) {
    // <bos>/<eos>/<pad> in the text are special tokens to the library, control pieces to
    // SentencePiece; and a shard separates documents by eos.
    if (d.find("<bos>") != std::string::npos || d.find("<eos>") != std::string::npos ||
        d.find("<pad>") != std::string::npos || d.find("<unk>") != std::string::npos)
      continue;
    jsonl += nlohmann::json({{"text", d}}).dump() + "\n";
    ++n;
  }
  ASSERT_GT(n, 2500u);
  testing::write_file(dir / "docs.jsonl", jsonl);
  TokenizeOptions o;
  o.inputs = {dir / "docs.jsonl"};
  o.out = dir / "json.bin";
  o.tokenizer_path = kFixtures + "/gemma/tokenizer.json";
  const TokenizeResult a = tokenize_files(o);
  o.out = dir / "model.bin";
  o.tokenizer_path = kFixtures + "/gemma/tokenizer.model";
  const TokenizeResult b = tokenize_files(o);
  EXPECT_EQ(a.documents, b.documents);
  EXPECT_GT(a.tokens, 20000u);
  EXPECT_NE(a.tokenizer, b.tokenizer);
  EXPECT_TRUE(testing::read_file(dir / "json.bin") == testing::read_file(dir / "model.bin"));
  // Encoded on several threads, the shard is the one-thread shard.
  o.tokenizer_path = kFixtures + "/gemma";
  for (int64_t threads : {1, 3, 8}) {
    o.num_threads = threads;
    o.out = dir / ("threads" + std::to_string(threads) + ".bin");
    tokenize_files(o);
    EXPECT_TRUE(testing::read_file(o.out) == testing::read_file(dir / "json.bin")) << threads;
  }

  DataOptions opt;
  opt.dataset_type = "shards";
  opt.dataset_path = dir / "json.bin";
  opt.seq = 8;
  opt.batch = 2;
  opt.vocab_size = 600;  // a model smaller than the tokenizer
  expect_error([&] { make_data_loader(opt); }, {"json.bin", "outside the model's vocabulary",
                                                "vocab_size 600", "vocabulary size 700"});
}

}  // namespace
}  // namespace gemmax
