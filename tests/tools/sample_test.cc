// `gemmax sample` through the binary: text from a Hugging Face folder equal to generate()'s on
// the same weights, repeatable with a seed; bad input gives the fix.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/checkpoint/hf_model.h"
#include "gemmax/io/hf_checkpoint.h"
#include "gemmax/io/hf_config.h"
#include "gemmax/model/generate.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::byte_config;
using testing::CliResult;
using testing::random_weights;
using testing::TempDir;

constexpr auto& gemmax = testing::run_gemmax;
// stdout alone (the text), and stderr into *err (the statistics).
CliResult gemmax_stdout(const std::string& args, std::string* err) {
  static const TempDir logs;
  CliResult r;
  const std::string err_file = logs / "stderr.txt";
  r.status = testing::run_command(
      "(" + std::string(GEMMAX_BINARY) + " " + args + " 2>" + err_file + ")", &r.out);
  *err = testing::read_file(err_file);
  return r;
}

TEST(SampleCli, GeneratesFromAHuggingFaceFolder) {
  TempDir dir;
  const ModelConfig cfg = byte_config();
  const ParamTable table(cfg);
  const Tensor w = random_weights(table, 4, DType::F32);
  write_hf_checkpoint(dir.str(), hf_named_tensors(table, w, "model.", DType::F32), 1 << 30);
  write_hf_config(cfg, DType::F32, dir / "config.json");
  const std::string model = " --model " + dir.str();

  std::string err;
  const CliResult r = gemmax_stdout(
      "sample" + model + " --prompt 'Hello' --max_new_tokens 8 --temperature 0", &err);
  ASSERT_EQ(r.status, 0) << r.out << err;
  EXPECT_EQ(r.out.rfind("Hello", 0), 0u) << r.out;
  EXPECT_NE(err.find("prompt 6 tokens | generated "), std::string::npos) << err;
  EXPECT_NE(err.find("| decode "), std::string::npos) << err;
  EXPECT_NE(err.find(" tokens/s"), std::string::npos) << err;

  // The command's greedy text is generate()'s on the same weights.
  ReferenceBackend be;
  const HfModelFolder folder = read_hf_model_folder(dir.str());
  Gemma4Model m(folder.config, be, {DType::F32, RematPolicy::None, 1});
  const auto tok = make_byte_tokenizer();
  const std::string text =
      generate_text(m, w, *tok, "Hello", {.max_new_tokens = 8, .temperature = 0});
  EXPECT_EQ(r.out.rfind(text + "\n", 0), 0u) << "cli:\n" << r.out << "\nin process:\n" << text;

  // Sampling with a seed repeats.
  const std::string sampled =
      "sample" + model + " --prompt 'Hello' --max_new_tokens 12 --seed 3 --top_p 0.9";
  const CliResult s1 = gemmax_stdout(sampled, &err), s2 = gemmax_stdout(sampled, &err);
  ASSERT_EQ(s1.status, 0) << s1.out << err;
  EXPECT_EQ(s1.out, s2.out);
}

// A folder's generation_config.json: generation stops at any of its eos ids, and do_sample
// false is greedy; a flag overrides the file.
TEST(SampleCli, FollowsTheFoldersGenerationConfig) {
  TempDir dir;
  const ModelConfig cfg = byte_config();
  const ParamTable table(cfg);
  const Tensor w = random_weights(table, 4, DType::F32);
  write_hf_checkpoint(dir.str(), hf_named_tensors(table, w, "model.", DType::F32), 1 << 30);
  write_hf_config(cfg, DType::F32, dir / "config.json");
  // The greedy continuation in process, and an id it reaches after a few tokens.
  ReferenceBackend be;
  Gemma4Model m(cfg, be, {DType::F32, RematPolicy::None, 1});
  const auto tok = make_byte_tokenizer();
  const Generation g = generate(m, w, *tok, "Hello", {.max_new_tokens = 8, .temperature = 0});
  ASSERT_EQ(g.new_ids.size(), 8u) << "stopped at the tokenizer's eos: pick another seed";
  const int32_t stop = g.new_ids[3];
  const size_t first = size_t(std::ranges::find(g.new_ids, stop) - g.new_ids.begin());
  testing::write_file(dir / "generation_config.json",
                      R"({"do_sample": false, "temperature": 5.0, "eos_token_id": [)" +
                          std::to_string(tok->eos_id()) + ", " + std::to_string(stop) + "]}");

  std::string err;
  const std::string sample = "sample --model " + dir.str() + " --prompt 'Hello' --max_new_tokens 8";
  const CliResult r = gemmax_stdout(sample, &err);
  ASSERT_EQ(r.status, 0) << r.out << err;
  EXPECT_NE(err.find("generation_config.json: greedy (do_sample false), stops at ids "),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("generated " + std::to_string(first + 1) + " tokens (eos)"), std::string::npos)
      << err;
  const std::vector<int32_t> kept(g.new_ids.begin(), g.new_ids.begin() + first + 1);
  EXPECT_EQ(r.out, "Hello" + tok->decode(kept) + "\n");
  // --temperature overrides do_sample false: sampling with a seed differs from greedy.
  const CliResult s = gemmax_stdout(sample + " --temperature 1 --seed 5", &err);
  ASSERT_EQ(s.status, 0) << s.out << err;
  EXPECT_NE(s.out, r.out) << "seed 5 samples the greedy text: pick another seed";

  testing::write_file(dir / "generation_config.json", R"({"eos_token_id": "1"})");
  const CliResult bad = gemmax_stdout(sample, &err);
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(err.find("generation_config.json': 'eos_token_id' must be a token id"),
            std::string::npos)
      << err;
}

// The small block (gemma4-e2b/e4b: per-layer inputs, layers on their donors' K/V) samples too,
// its greedy text the in-process generate()'s.
TEST(SampleCli, GeneratesFromASmallBlockFolder) {
  TempDir dir;
  ModelConfig cfg = testing::small_block_config();
  cfg.vocab_size = cfg.per_layer_vocab = kByteVocabSize;
  const ParamTable table(cfg);
  const Tensor w = random_weights(table, 5, DType::F32);
  write_hf_checkpoint(dir.str(), hf_named_tensors(table, w, "model.", DType::F32), 1 << 30);
  write_hf_config(cfg, DType::F32, dir / "config.json");

  std::string err;
  const CliResult r = gemmax_stdout(
      "sample --model " + dir.str() + " --prompt 'Hello' --max_new_tokens 8 --temperature 0", &err);
  ASSERT_EQ(r.status, 0) << r.out << err;
  ReferenceBackend be;
  const HfModelFolder folder = read_hf_model_folder(dir.str());
  ASSERT_EQ(folder.config.num_kv_shared_layers, 2);
  ASSERT_TRUE(folder.config.has_per_layer_inputs());
  Gemma4Model m(folder.config, be, {DType::F32, RematPolicy::None, 1});
  const std::string text =
      generate_text(m, w, *make_byte_tokenizer(), "Hello", {.max_new_tokens = 8, .temperature = 0});
  EXPECT_EQ(r.out.rfind(text + "\n", 0), 0u) << "cli:\n" << r.out << "\nin process:\n" << text;
}

TEST(SampleCli, BadInputGivesTheFix) {
  TempDir dir;
  const ModelConfig cfg = testing::small_test_config(2);  // vocab 37 < the byte tokenizer's
  const ParamTable table(cfg);
  const Tensor w = random_weights(table, 4, DType::F32);
  write_hf_checkpoint(dir.str(), hf_named_tensors(table, w, "model.", DType::F32), 1 << 30);
  write_hf_config(cfg, DType::F32, dir / "config.json");
  const std::string model = " --model " + dir.str();
  auto expect_failure = [](const std::string& args, const std::vector<std::string>& parts) {
    const CliResult r = gemmax(args);
    EXPECT_NE(r.status, 0) << args;
    for (const auto& p : parts)
      EXPECT_NE(r.out.find(p), std::string::npos) << args << ":\n" << r.out;
  };
  expect_failure("sample --model " + dir.file("nothing") + " --prompt hi",
                 {"nothing", "does not exist"});
  expect_failure("sample" + model + " --prompt hi",
                 {"larger vocabulary than the model (37 tokens)"});
  expect_failure("sample" + model + " --prompt ''", {"--prompt is empty"});
  expect_failure("sample" + model, {"missing --prompt"});
  expect_failure("sample" + model + " --prompt hi --top_p 0", {"top_p must be in (0, 1]"});
  expect_failure("sample" + model + " --prompt hi --temperature -1", {"temperature"});
  expect_failure("sample" + model + " --prompt hi --max_new_tokens 0", {"max_new_tokens"});
  expect_failure("sample" + model + " --prompt hi --tokenizer words", {"--tokenizer 'words'"});
  expect_failure("sample" + model + " --prompt hi --tokenizer sentencepiece",
                 {"--tokenizer_path", "no tokenizer.json or tokenizer.model"});
  expect_failure("sample" + model + " --prompt hi --tokenizer_path " + dir.file("none.model"),
                 {"none.model", "no such file"});
  expect_failure("sample" + model + " --prompt hi --temprature 1", {"did you mean --temperature"});
  // The folder's own tokenizer.json is the default, and its vocabulary is checked as the byte one.
  const std::string fixtures =
      std::string(GEMMAX_SOURCE_DIR) + "/tests/data/fixtures/tokenizer_json/gemma/";
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(fixtures + f, dir / f);
  expect_failure("sample" + model + " --prompt hi",
                 {"larger vocabulary than the model (37 tokens)", "huggingface"});
  expect_failure("sample" + model + " --prompt hi --tokenizer sentencepiece",
                 {"tokenizer_type=sentencepiece but", "tokenizer.json"});
  const CliResult help = gemmax("sample --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("--top_p"), std::string::npos);
}

}  // namespace
}  // namespace gemmax
