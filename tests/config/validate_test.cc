// Hyperparameters and sizes checked once, before anything is allocated: each bad value names
// its key, the value and the valid range; sizes that overflow or cannot fit name their keys.
#include <gtest/gtest.h>

#include <filesystem>

#include "gemmax/base/checked.h"
#include "gemmax/config/validate.h"
#include "gemmax/io/hf_checkpoint.h"
#include "gemmax/io/hf_config.h"
#include "gemmax/checkpoint/hf_model.h"
#include "gemmax/checkpoint/model_dir.h"
#include "test_util.h"

namespace gemmax {
namespace {
namespace fs = std::filesystem;
using testing::expect_error;
using testing::run_command;
using testing::TempDir;

void expect_refused(const std::string& kv, const std::vector<std::string>& parts) {
  SCOPED_TRACE(kv);
  expect_error([&] { validate_run_config(Config::defaults({kv})); }, parts);
}

TEST(Validate, TheDefaultsAndThePresetsPass) {
  validate_run_config(Config::defaults());
  for (const std::string& p : Config::preset_names())
    validate_run_config(Config::defaults({"model_name=" + p}));
}

TEST(Validate, EveryHyperparameterHasARangeNamedInItsError) {
  expect_refused("learning_rate=-0.001", {"learning_rate=-0.001", "valid range (0, 1]"});
  expect_refused("learning_rate=0", {"learning_rate=0", "(0, 1]"});
  expect_refused("learning_rate=inf", {"learning_rate=inf", "not a finite number"});
  expect_refused("learning_rate=nan", {"learning_rate=nan", "not a finite number"});
  expect_refused("learning_rate=5", {"learning_rate=5", "(0, 1]"});
  expect_refused("learning_rate_schedule_steps=0", {"learning_rate_schedule_steps=0", "-1"});
  expect_refused("warmup_steps_fraction=1.5", {"warmup_steps_fraction=1.5", "[0, 1]"});
  expect_refused("cosine_learning_rate_final_fraction=-0.5",
                 {"cosine_learning_rate_final_fraction=-0.5", "[0, 1]", "negative"});
  expect_refused("adam_b1=1", {"adam_b1=1", "[0, 1)"});
  expect_refused("adam_b2=-0.1", {"adam_b2=-0.1", "[0, 1)"});
  expect_refused("adam_eps=0", {"adam_eps=0", "(0, inf)"});
  expect_refused("adam_eps_root=-1", {"adam_eps_root=-1", "[0, inf)"});
  expect_refused("adam_weight_decay=-0.1", {"adam_weight_decay=-0.1", "[0, 1]"});
  expect_refused("gradient_clipping_threshold=-1", {"gradient_clipping_threshold=-1", "[0, inf)"});
  expect_refused("steps=-1", {"steps=-1", "[0, "});
  expect_refused("checkpoint_period=-5", {"checkpoint_period=-5"});
  expect_refused("max_num_checkpoints_to_keep=-1", {"max_num_checkpoints_to_keep=-1"});
  expect_refused("skip_nonfinite_steps=-1", {"skip_nonfinite_steps=-1"});
  expect_refused("log_period=0", {"log_period=0", "[1, "});
  expect_refused("comm_timeout_seconds=-1", {"comm_timeout_seconds=-1", "[0, inf)"});
  expect_refused("max_memory_gb=nan", {"max_memory_gb=nan", "not a finite number"});
  expect_refused("num_threads=100000", {"num_threads=100000", "[0, 4096]"});
  expect_refused("sample_max_new_tokens=-1", {"sample_max_new_tokens=-1"});
  expect_refused("fsdp_prefetch_layers=-1", {"fsdp_prefetch_layers=-1"});
  expect_refused("data_shuffle_seed=-3", {"data_shuffle_seed=-3"});
  expect_refused("peak_tflops_per_device=-1", {"peak_tflops_per_device=-1"});
  // Any float key at all: a non-finite value never configures anything.
  expect_refused("load_balance_loss_weight=inf", {"load_balance_loss_weight=inf", "finite"});
}

TEST(Validate, SizesThatOverflowOrExceedTheIndicesNameTheirKeys) {
  // The hostile pass's example: 1e16 tokens per step.
  expect_refused("per_device_batch_size=100000000",
                 {"per_device_batch_size", "max_target_length", "num_experts_per_tok", "int32"});
  expect_error([] {
    validate_run_config(Config::defaults(
        {"per_device_batch_size=100000000", "max_target_length=100000000"}));
  }, {"per_device_batch_size", "max_target_length"});
  // Each size is within its own limit, and the token copies fit int32; the logits' bytes do
  // not fit 64 bits.
  expect_error([] {
    validate_run_config(Config::defaults({"per_device_batch_size=1", "max_target_length=1073741823", "num_experts_per_tok=1",
                                          "vocab_size=2147483647"}));
  }, {"per_device_batch_size x max_target_length x vocab_size", "does not fit in 64 bits"});
  // The model's own sizes: a parameter count beyond what gemmax addresses.
  expect_error([] {
    validate_run_config(Config::defaults({"num_experts=16777216", "num_experts_per_tok=2",
                                          "base_moe_mlp_dim=16777216", "base_emb_dim=16777216"}));
  }, {"parameters", "more than"});
  expect_refused("per_device_batch_size=0", {"per_device_batch_size=0", "[1, "});
  expect_refused("max_target_length=-4", {"max_target_length=-4"});
}

TEST(Validate, CheckedArithmeticNamesWhatOverflowed) {
  EXPECT_EQ(checked_mul(int64_t(1) << 31, int64_t(1) << 31, "a x b"), int64_t(1) << 62);
  expect_error([] { checked_mul(int64_t(1) << 32, int64_t(1) << 32, "rows x columns"); },
               {"rows x columns", "4294967296 x 4294967296", "does not fit in 64 bits"});
  expect_error([] { checked_add(INT64_MAX, 1, "the total"); }, {"the total", "+"});
  expect_error([] { checked_product({1 << 20, 1 << 20, 1 << 20, 1 << 5}, "four sizes"); },
               {"four sizes"});
  expect_error([] { Tensor::empty({int64_t(1) << 40, int64_t(1) << 40}, DType::F32); },
               {"[1099511627776, 1099511627776]", "64 bits"});
}

using Cli = testing::CliResult;
constexpr auto& gemmax = testing::run_gemmax;

TEST(Validate, TheCommandsRefuseHugeSizesWithoutNegativeNumbersOrSourcePaths) {
  TempDir dir;
  for (const std::string& cmd :
       {"train dry_run=true max_memory_gb=1", "info", "train", "bench --steps 1"}) {
    const Cli r = gemmax(cmd + " per_device_batch_size=100000000 max_target_length=100000000" +
                         " base_output_directory=" + dir.str());
    SCOPED_TRACE(cmd);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("per_device_batch_size"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("fits in"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find(" -"), std::string::npos) << "a negative size: " << r.out;
    EXPECT_EQ(r.out.find(".cc:"), std::string::npos) << "a source path: " << r.out;
  }
  EXPECT_TRUE(dir.list().empty());
}

TEST(Validate, ARunLargerThanThisMachineIsRefusedBeforeAllocating) {
  TempDir dir;
  // The real 26B-A4B on one rank: ~400 GB of weights, gradients and moments.
  const Cli r = gemmax("train model_name=gemma4-26b-a4b per_device_batch_size=1 "
                       "max_target_length=4096 base_output_directory=" + dir.str());
  EXPECT_EQ(r.status, 1) << r.out;
  for (const char* part : {"more than this machine's", "model_name=gemma4-26b-a4b",
                           "per_device_batch_size=1", "max_target_length=4096", "nothing was allocated"})
    EXPECT_NE(r.out.find(part), std::string::npos) << part << ": " << r.out;
  EXPECT_TRUE(dir.list().empty());
}

TEST(Validate, AllocationFailuresNameWhatAndTheKeys) {
  TempDir dir;
  // Under a 3 GiB address-space limit, 4096 threads' scratch cannot be had.
  Cli r;
  r.status = run_command("ulimit -v 3000000; " + std::string(GEMMAX_BINARY) +
                             " train num_threads=4096 steps=1 base_output_directory=" + dir.str(),
                         &r.out);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("out of host memory"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("num_threads"), std::string::npos) << r.out;
}

TEST(Validate, DuplicateKeysAndSeveralDocumentsAreErrors) {
  TempDir dir;
  testing::write_file(dir / "dup.yml", "steps: 10\nlearning_rate: 0.001\nsteps: 20\n");
  expect_error([&] { Config::load(dir / "dup.yml", {}); },
               {dir / "dup.yml", "key 'steps' is set twice", "lines 1 and 3"});
  testing::write_file(dir / "docs.yml", "steps: 10\n---\nsteps: 20\n");
  expect_error([&] { Config::load(dir / "docs.yml", {}); },
               {dir / "docs.yml", "2 YAML documents"});
  testing::write_file(dir / "ended.yml", "steps: 10\n...\nsteps: 20\n");
  expect_error([&] { Config::load(dir / "ended.yml", {}); }, {"2 YAML documents"});
  testing::write_file(dir / "one.yml", "# a comment\n---\nsteps: 10\n  # indented\n...\n");
  EXPECT_EQ(Config::load(dir / "one.yml", {}).get_int("steps"), 10);
  // An input on which yaml-cpp's LoadAll never returns: read at once (it holds no key).
  testing::write_file(dir / "odd.yml", ",m\xee");
  EXPECT_EQ(Config::load(dir / "odd.yml", {}).get_int("steps"), Config::defaults().get_int("steps"));
}

TEST(Validate, NonFiniteLoadedWeightsAreRefusedNamingTensorAndIndex) {
  TempDir dir;
  const ModelConfig cfg = testing::small_test_config(2);
  const ParamTable table(cfg);
  Tensor w = Tensor::empty({table.total()}, DType::F32);
  init_params(table, w, 3);
  size_t pick = 0;  // a matrix, so that the index has a row and a column
  while (table.specs()[pick].shape.size() != 2) ++pick;
  const ParamSpec& bad = table.specs()[pick];
  Tensor view = table.view(w, bad.name);
  const int64_t flat = bad.shape[1] + 2;  // element [1, 2]
  view.data<float>()[flat] = std::numeric_limits<float>::quiet_NaN();
  write_hf_checkpoint(dir.str(), hf_named_tensors(table, w, "model.", DType::BF16), 1 << 30);
  write_hf_config(cfg, DType::BF16, dir / "config.json");
  expect_error([&] { load_model_dir(dir.str(), DType::F32); },
                                       {"model." + bad.name, "element [1, 2]", "nan",
                                        "flat index " + std::to_string(flat)});
  // The same refusal through the commands that read model folders.
  testing::write_file(dir / "t.bin", std::string(4 * 9, '\0'));
  for (const std::string& cmd :
       {"sample --model " + dir.str() + " --prompt hi",
        "grad --model " + dir.str() + " --tokens " + dir / "t.bin" + " --batch 1 --out " +
            dir / "../g.safetensors",
        "train load_parameters_path=" + dir.str() + " base_output_directory=" + dir / "../runs"}) {
    const Cli r = gemmax(cmd);
    EXPECT_EQ(r.status, 1) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find("model." + bad.name), std::string::npos) << cmd << "\n" << r.out;
  }
}

}  // namespace
}  // namespace gemmax
