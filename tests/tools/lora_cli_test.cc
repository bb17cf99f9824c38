// A LoRA run's commands, as a user runs them: train on an exported base, export the run as a
// PEFT folder (the run's own adapter/ folder, byte for byte) and merged (what eval then reports
// equals the unmerged checkpoint's), and the same adapter through --adapter in eval, sample and
// grad. Wrong uses are refused, naming the flag.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "gemmax/io/safetensors.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::run_gemmax;
using testing::TempDir;

double eval_loss(const std::string& out) {
  const size_t at = out.find("{\"eval/avg_loss\"");
  EXPECT_NE(at, std::string::npos) << out;
  if (at == std::string::npos) return NAN;
  return nlohmann::json::parse(out.substr(at, out.find('\n', at) - at))["eval/avg_loss"]
      .get<double>();
}

// The line that continues the prompt "Once" (stdout; the log lines are stderr's).
std::string completion(const std::string& out) {
  const size_t at = out.find("\nOnce");
  return at == std::string::npos ? out : out.substr(at + 1, out.find('\n', at + 1) - at - 1);
}

class LoraCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    const std::string common =
        " backend=reference dtype=float32 weight_dtype=float32 "
        "sample_max_new_tokens=0 eval_interval=-1 per_device_batch_size=2 "
        "max_target_length=32 base_emb_dim=32 base_output_directory=" +
        dir_->str();
    auto must = [](const testing::CliResult& r) { ASSERT_EQ(r.status, 0) << r.out; };
    must(run_gemmax("train steps=4 run_name=base" + common));
    must(run_gemmax("export --dtype float32 --checkpoint " + (*dir_ / "base") + " --out " +
                    (*dir_ / "base_hf")));
    must(
        run_gemmax("train steps=4 run_name=lora enable_lora=true lora_rank=4 lora_alpha=8 "
                   "learning_rate=3e-2 load_parameters_path=" +
                   (*dir_ / "base_hf") + common));
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string at(const std::string& rel) { return *dir_ / rel; }
  static TempDir* dir_;
};
TempDir* LoraCli::dir_ = nullptr;

const std::string kEval =
    " backend=reference dtype=float32 weight_dtype=float32 base_emb_dim=32 max_target_length=32 "
    "eval_per_device_batch_size=2 eval_steps=2";

TEST_F(LoraCli, ExportWritesTheRunsPeftFolder) {
  ASSERT_EQ(run_gemmax("export --checkpoint " + at("lora") + " --out " + at("peft")).status, 0);
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors"})
    EXPECT_EQ(testing::read_file(at("peft/") + f), testing::read_file(at("lora/adapter/") + f))
        << f;
  const nlohmann::json c =
      nlohmann::json::parse(testing::read_file(at("peft/adapter_config.json")));
  EXPECT_EQ(c["base_model_name_or_path"], at("base_hf"));
  EXPECT_EQ(c["r"], 4);
}

// The merged folder evaluates as the checkpoint does (fp32 rounding), and the base alone differs.
TEST_F(LoraCli, TheMergedFolderEvaluatesAsTheCheckpoint) {
  ASSERT_EQ(run_gemmax("export --dtype float32 --merge_lora --checkpoint " + at("lora") +
                       " --out " + at("merged"))
                .status,
            0);
  const testing::CliResult lora = run_gemmax("eval checkpoint=" + at("lora") + kEval);
  const testing::CliResult merged = run_gemmax("eval hf_dir=" + at("merged") + kEval);
  const testing::CliResult base = run_gemmax("eval hf_dir=" + at("base_hf") + kEval);
  const testing::CliResult adapter =
      run_gemmax("eval hf_dir=" + at("base_hf") + " --adapter " + at("lora/adapter") + kEval);
  const double l = eval_loss(lora.out);
  EXPECT_NEAR(eval_loss(merged.out), l, 1e-5 * l) << merged.out;
  EXPECT_EQ(eval_loss(adapter.out), l) << "the same adapters, unmerged: " << adapter.out;
  EXPECT_GT(std::abs(eval_loss(base.out) - l), 1e-3) << base.out;
}

TEST_F(LoraCli, SampleAndGradTakeTheAdapter) {
  const std::string greedy = " --prompt Once --max_new_tokens 8 --temperature 0";
  const testing::CliResult run = run_gemmax("sample --model " + at("lora") + greedy);
  const testing::CliResult adapter =
      run_gemmax("sample --model " + at("base_hf") + " --adapter " + at("lora/adapter") + greedy);
  ASSERT_EQ(run.status, 0) << run.out;
  ASSERT_EQ(adapter.status, 0) << adapter.out;
  EXPECT_EQ(completion(run.out), completion(adapter.out));
  // grad --adapter: the adapters' gradients under PEFT's names.
  std::vector<int32_t> tokens(2 * 17);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(3 + (i * 7) % 200);
  testing::write_file(at("tokens.bin"),
                      std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4));
  const testing::CliResult g =
      run_gemmax("grad --model " + at("base_hf") + " --adapter " + at("lora/adapter") +
                 " --tokens " + at("tokens.bin") + " --batch 2 --out " + at("grads.safetensors"));
  ASSERT_EQ(g.status, 0) << g.out;
  const SafetensorsFile grads = SafetensorsFile::open(at("grads.safetensors"));
  const SafetensorsFile adapters =
      SafetensorsFile::open(at("lora/adapter/adapter_model.safetensors"));
  ASSERT_EQ(grads.entries().size(), adapters.entries().size());
  for (const SafetensorsEntry& e : adapters.entries())
    EXPECT_TRUE(grads.has(e.name) && grads.entry(e.name).shape == e.shape) << e.name;
}

TEST_F(LoraCli, WrongUsesAreRefusedNamingTheFlag) {
  const testing::CliResult nothing =
      run_gemmax("export --merge_lora --checkpoint " + at("base") + " --out " + at("x"));
  EXPECT_EQ(nothing.status, 1);
  EXPECT_NE(nothing.out.find("carries no LoRA adapters"), std::string::npos) << nothing.out;
  const testing::CliResult unmerged =
      run_gemmax("export --checkpoint " + at("base_hf") + " --adapter " + at("lora/adapter") +
                 " --out " + at("y"));
  EXPECT_EQ(unmerged.status, 1);
  EXPECT_NE(unmerged.out.find("--merge_lora"), std::string::npos) << unmerged.out;
  const testing::CliResult twice = run_gemmax("sample --model " + at("lora") + " --adapter " +
                                              at("lora/adapter") + " --prompt x");
  EXPECT_EQ(twice.status, 1);
  EXPECT_NE(twice.out.find("carries adapters already"), std::string::npos) << twice.out;
  // The export never writes over the run's base.
  const testing::CliResult over =
      run_gemmax("export --merge_lora --checkpoint " + at("lora") + " --out " + at("base_hf"));
  EXPECT_EQ(over.status, 1);
  EXPECT_NE(over.out.find("load_parameters_path"), std::string::npos) << over.out;
}

}  // namespace
}  // namespace gemmax
