#include "gemmax/data/tokenizer.h"

#include <gtest/gtest.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <memory>

#include "test_util.h"
#include "gemmax/data/builtin_corpus.h"
#include "gemmax/data/loader.h"
#include "gemmax/data/token_shard.h"
#include "gemmax/data/tokenize_files.h"
#include "gemmax/io/tfevents.h"

namespace gemmax {
namespace {

using testing::expect_error;
using testing::TempDir;

TEST(ByteTokenizer, Ids) {
  auto t = make_tokenizer("byte", "");
  EXPECT_EQ(t->vocab_size(), 259);
  EXPECT_EQ(t->pad_id(), 0);
  EXPECT_EQ(t->eos_id(), 1);
  EXPECT_EQ(t->bos_id(), 2);
  EXPECT_EQ(t->encode("Hi"), (std::vector<int32_t>{'H' + 3, 'i' + 3}));
  EXPECT_EQ(t->encode("\xff"), (std::vector<int32_t>{258}));
  EXPECT_TRUE(t->encode("").empty());
}

TEST(ByteTokenizer, RoundTripUtf8) {
  auto t = make_byte_tokenizer();
  const std::string text =
      "Hello, w\xc3\xb6rld! \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82 tab\tnl\n\x01\x7f\xff";
  const auto ids = t->encode(text);
  EXPECT_EQ(ids.size(), text.size());
  for (int32_t id : ids) EXPECT_TRUE(id >= 3 && id < 259);
  EXPECT_EQ(t->decode(ids), text);
}

TEST(ByteTokenizer, DecodeSkipsSpecialsAndMarksUnknown) {
  auto t = make_byte_tokenizer();
  const std::vector<int32_t> ids = {2, 'a' + 3, 0, 1, 'b' + 3, 400, -1};
  EXPECT_EQ(t->decode(ids), "ab\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Tokenizer, FactoryErrors) {
  TempDir dir;
  expect_error([] { make_tokenizer("bpe", ""); },
               {"tokenizer_type 'bpe'", "auto", "byte", "sentencepiece", "huggingface"});
  expect_error([] { make_tokenizer("byte", "tok.model"); }, {"tok.model", "byte"});
  expect_error([] { make_tokenizer("sentencepiece", ""); }, {"tokenizer_path"});
  expect_error([&] { make_tokenizer("sentencepiece", dir.file("none.model")); },
               {"none.model", "no such file"});
  expect_error([&] { make_tokenizer("sentencepiece", dir.path.string()); },
               {"is a folder without tokenizer.json or tokenizer.model"});
  const std::string junk = dir.file("tok.model");
  testing::write_file(junk, "\x01\x02 not a model");
  expect_error([&] { make_tokenizer("sentencepiece", junk); },
               {"tok.model", "not a SentencePiece model"});
}

// A tiny SentencePiece model trained once on the built-in corpus, with Gemma's special-id
// layout (pad 0, eos 1, bos 2, unk 3).
class SentencePieceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    std::string text;
    for (const auto& doc : builtin_corpus(1, 60 * 1024)) {
      std::string line = doc;
      std::replace(line.begin(), line.end(), '\n', ' ');
      text += line + "\n";
    }
    testing::write_file(dir_->file("train.txt"), text);
    const auto status = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + dir_->file("train.txt") + " --model_prefix=" + dir_->file("sp") +
        " --vocab_size=300 --model_type=unigram --character_coverage=1.0 --pad_id=0 --eos_id=1"
        " --bos_id=2 --unk_id=3 --hard_vocab_limit=false --num_threads=1 --minloglevel=2");
    ASSERT_TRUE(status.ok()) << status.ToString();
    model_ = dir_->file("sp.model");
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static TempDir* dir_;
  static std::string model_;
};
TempDir* SentencePieceTest::dir_ = nullptr;
std::string SentencePieceTest::model_;

TEST_F(SentencePieceTest, IdsComeFromTheModel) {
  auto t = make_tokenizer("sentencepiece", model_);
  EXPECT_EQ(t->vocab_size(), 300);
  EXPECT_EQ(t->pad_id(), 0);
  EXPECT_EQ(t->eos_id(), 1);
  EXPECT_EQ(t->bos_id(), 2);
  EXPECT_NE(t->describe().find("sentencepiece"), std::string::npos);
}

// Debian's SentencePiece carries its own protobuf runtime; gemmax's event files use the
// system's. Both work in one process, in either order (see CMakeLists.txt).
TEST_F(SentencePieceTest, WorksBesideTensorBoardEventFiles) {
  TempDir dir;
  const std::string text = "Once upon a time, a brave fox found 12 red apples near the river.";
  const auto before = make_tokenizer("sentencepiece", model_)->encode(text);
  {
    EventFileWriter w(dir / "tb");
    const std::vector<NamedScalar> v = {{"learning/loss", 2.5}};
    w.write_scalars(0, v);
    w.write_scalars(1, v);
  }
  drop_events_from(dir / "tb", 1);  // parses every event
  ASSERT_EQ(list_event_files(dir / "tb").size(), 1u);
  EXPECT_EQ(read_tfrecords(list_event_files(dir / "tb")[0]).records.size(), 2u);
  auto t = make_tokenizer("sentencepiece", model_);
  EXPECT_EQ(t->encode(text), before);
  EXPECT_EQ(t->decode(before), text);
}

TEST_F(SentencePieceTest, RoundTrip) {
  auto t = make_tokenizer("sentencepiece", model_);
  const std::string text = "Once upon a time, a brave fox found 12 red apples near the river.";
  const auto ids = t->encode(text);
  ASSERT_FALSE(ids.empty());
  EXPECT_LT(ids.size(), text.size());  // pieces longer than one character were learned
  for (int32_t id : ids) EXPECT_TRUE(id > 2 && id < 300) << id;
  EXPECT_EQ(t->decode(ids), text);
  // Specials decode to nothing; out-of-range ids to U+FFFD.
  std::vector<int32_t> framed = {2};
  framed.insert(framed.end(), ids.begin(), ids.end());
  framed.push_back(1);
  EXPECT_EQ(t->decode(framed), text);
  EXPECT_EQ(t->decode(std::vector<int32_t>{ids[0], 5000}),
            t->decode(std::vector<int32_t>{ids[0]}) + "\xEF\xBF\xBD");
}

TEST_F(SentencePieceTest, TokenizeFilesIntoShardAndLoad) {
  TempDir dir;
  const std::string txt = dir.file("docs.txt");
  const std::vector<std::string> lines = {"The cat says meow.", "Seven plus five is twelve.",
                                          "Anna walked to the park in the morning."};
  testing::write_file(txt, lines[0] + "\n\n" + lines[1] + "\r\n" + lines[2] + "\n");
  TokenizeOptions o;
  o.inputs = {txt};
  o.out = dir.file("sp.bin");
  o.tokenizer_type = "sentencepiece";
  o.tokenizer_path = model_;
  o.lines = true;
  const TokenizeResult r = tokenize_files(o);
  EXPECT_EQ(r.documents, 3u);

  auto t = make_tokenizer("sentencepiece", model_);
  TokenShard s(o.out);
  EXPECT_EQ(s.header().vocab_size, 300u);
  EXPECT_EQ(s.header().eos_id, 1u);
  EXPECT_EQ(s.header().bos_id, 2u);
  EXPECT_EQ(s.header().pad_id, 0u);
  EXPECT_EQ(s.header().num_tokens, r.tokens);
  s.validate_tokens(300);
  // Split at eos: each document is bos, the line's ids, eos.
  std::vector<int32_t> doc;
  size_t d = 0;
  for (uint32_t id : s.tokens()) {
    if (id == 1) {
      ASSERT_LT(d, lines.size());
      EXPECT_EQ(doc.front(), 2);
      EXPECT_EQ(std::vector<int32_t>(doc.begin() + 1, doc.end()), t->encode(lines[d]));
      EXPECT_EQ(t->decode(doc), lines[d]);
      doc.clear();
      ++d;
    } else {
      doc.push_back(int32_t(id));
    }
  }
  EXPECT_EQ(d, 3u);

  DataOptions opt;
  opt.dataset_type = "shards";
  opt.dataset_path = o.out;
  opt.seq = 8;
  opt.batch = 2;
  opt.vocab_size = 300;
  auto loader = make_data_loader(opt);
  const Batch b = loader->next();
  EXPECT_EQ(b.inputs[0], 2);  // the first document's bos
  // The same shard with a model vocabulary smaller than the tokenizer's is caught.
  opt.vocab_size = 10;
  expect_error([&] { make_data_loader(opt); }, {"sp.bin", "outside the model's vocabulary",
                                                "vocab_size 10", "vocabulary size 300"});
}

TEST(TokenizeFiles, JsonlTextAndErrors) {
  TempDir dir;
  const std::string jl = dir.file("a.jsonl"), txt = dir.file("b.txt");
  testing::write_file(
      jl,
      "{\"text\": \"first doc\", \"id\": 1}\n\n{\"text\": \"\"}\n{\"text\": \"second\\nline\"}\n");
  testing::write_file(txt, "whole file\nis one document\n");
  TokenizeOptions o;
  o.inputs = {jl, txt};
  o.out = dir.file("out.bin");
  const TokenizeResult r = tokenize_files(o);
  EXPECT_EQ(r.documents, 3u);
  EXPECT_EQ(r.skipped_empty, 1u);
  auto t = make_byte_tokenizer();
  TokenShard s(o.out);
  std::vector<int32_t> all(s.tokens().begin(), s.tokens().end());
  EXPECT_EQ(t->decode(all), "first docsecond\nlinewhole file\nis one document\n");
  EXPECT_EQ(s.header().num_tokens, 3u * 2 + 9 + 11 + 27);

  o.add_bos = false;
  o.inputs = {txt};
  EXPECT_EQ(tokenize_files(o).tokens, 27u + 1);

  testing::write_file(jl, "{\"text\": \"ok\"}\n{\"body\": \"x\"}\n");
  o.inputs = {jl};
  expect_error([&] { tokenize_files(o); }, {"a.jsonl:2", "\"text\"", "--text_key"});
  testing::write_file(jl, "{\"text\": 5}\n");
  expect_error([&] { tokenize_files(o); }, {"a.jsonl:1", "number", "string"});
  testing::write_file(jl, "not json\n");
  expect_error([&] { tokenize_files(o); }, {"a.jsonl:1", "not valid JSON"});
  o.inputs = {dir.file("missing.txt")};
  expect_error([&] { tokenize_files(o); }, {"missing.txt"});
  testing::write_file(txt, "");
  o.inputs = {txt};
  o.out = dir.file("empty.bin");
  expect_error([&] { tokenize_files(o); }, {"no documents"});
  EXPECT_FALSE(std::filesystem::exists(o.out));
}

}  // namespace
}  // namespace gemmax
