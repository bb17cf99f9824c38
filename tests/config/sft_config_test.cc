// MaxText's SFT recipe file (configs/post_train/sft.yml) as gemmax reads it: its base_config
// resolved as MaxText resolves it, its nested lora: block and the dotted form of its keys on the
// command line, its list values, and its keys that gemmax does not implement reported.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "gemmax/config/config.h"
#include "gemmax/config/train_config.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::expect_error;
using testing::TempDir;
using testing::write_file;

// The shape of MaxText 0.2.5's configs/post_train/sft.yml (its keys and value forms).
constexpr char kSft[] =
    "base_config: \"base.yml\"\n"
    "use_sft: true\n"
    "use_tunix_gradient_accumulation: true\n"
    "sft_train_on_completion_only: true\n"
    "packing: true\n"
    "learning_rate: 2.e-5\n"
    "lora:\n"
    "  enable_lora: false\n"
    "  lora_rank: 0\n"
    "  lora_alpha: 0.0\n"
    "  lora_module_path: \"\"\n"
    "  lora_weight_qtype: null\n"
    "  lora_tile_size: null\n"
    "  lora_restore_path: \"\"\n"
    "dataset_type: hf\n"
    "hf_path: 'HuggingFaceH4/ultrachat_200k'\n"
    "train_split: 'train_sft'\n"
    "hf_eval_split: 'test_sft'\n"
    "train_data_columns: ['messages']\n"
    "eval_data_columns: ['messages']\n";

// A stand-in for MaxText's configs/base.yml: keys sft.yml overrides, and some it does not.
constexpr char kBase[] =
    "model_name: \"default\"\n"
    "learning_rate: 3.e-5\n"
    "steps: 150_001\n"
    "dataset_type: synthetic\n"
    "train_split: 'train'\n"
    "train_data_columns: ['text']\n"
    "grain_packing_type: 'first_fit'\n"
    "enable_data_shuffling: true\n"
    "compile_xla_flags: \"\"\n";

TEST(ConfigSft, SftYmlLoadsWithItsBaseConfigNestedBlockAndDottedOverrides) {
  TempDir dir;
  std::filesystem::create_directories(dir / "configs/post_train");
  write_file(dir / "configs/base.yml", kBase);
  write_file(dir / "configs/post_train/sft.yml", kSft);
  const Config c = Config::load(dir / "configs/post_train/sft.yml",
                                {"model_name=gemma4-e2b", "hf_path=/data/ultrachat",
                                 "lora.lora_rank=16", "steps=3"});
  EXPECT_EQ(c.get_string("dataset_type"), "hf");
  EXPECT_EQ(c.get_string("hf_path"), "/data/ultrachat");
  EXPECT_EQ(c.get_string("train_split"), "train_sft");  // sft.yml over base.yml
  EXPECT_EQ(c.get_string("hf_eval_split"), "test_sft");
  EXPECT_EQ(c.get_string("train_data_columns"), "messages");
  EXPECT_EQ(c.get_string("eval_data_columns"), "messages");
  EXPECT_DOUBLE_EQ(c.get_double("learning_rate"), 2e-5);
  EXPECT_EQ(c.get_int("steps"), 3);
  EXPECT_TRUE(c.get_bool("sft_train_on_completion_only"));
  const std::vector<std::string> ignored = c.ignored_maxtext_keys();
  for (const char* k : {"use_sft", "use_tunix_gradient_accumulation", "compile_xla_flags"})
    EXPECT_NE(std::find(ignored.begin(), ignored.end(), k), ignored.end()) << k;
  // The lora: block is gemmax's (docs/LORA.md): read flat, its nulls MaxText's None.
  const TrainConfig tc = train_config_from(c);
  EXPECT_FALSE(tc.lora.enable_lora);
  EXPECT_EQ(tc.lora.lora_rank, 16);  // the dotted override over the block's 0
  EXPECT_EQ(tc.lora.lora_weight_qtype, LoraWeightQtype::None);
  EXPECT_EQ(tc.lora.lora_tile_size, 64);
  for (const char* k : {"enable_lora", "lora_rank", "lora_alpha", "lora_restore_path"})
    EXPECT_EQ(std::find(ignored.begin(), ignored.end(), k), ignored.end()) << k;
  // Turned on in the dotted form as in the block.
  const TrainConfig on = train_config_from(
      Config::load(dir / "configs/post_train/sft.yml",
                   {"model_name=gemma4-e2b", "lora.enable_lora=true", "lora.lora_rank=8",
                    "lora.lora_alpha=16", "lora.lora_weight_qtype=nf4"}));
  EXPECT_TRUE(on.lora.enable_lora);
  EXPECT_EQ(on.lora.lora_rank, 8);
  EXPECT_EQ(on.lora.lora_alpha, 16.0);
  EXPECT_EQ(on.lora.lora_weight_qtype, LoraWeightQtype::Nf4);
  // A list on the command line, in MaxText's forms.
  for (const char* v : {"['prompt', 'completion']", "[prompt,completion]", "prompt,completion"})
    EXPECT_EQ(Config::load(dir / "configs/post_train/sft.yml",
                           {"model_name=gemma4-e2b", std::string("train_data_columns=") + v})
                  .get_string("train_data_columns"),
              "prompt,completion")
        << v;
  // Unknown keys inside a block are still unknown.
  write_file(dir / "configs/post_train/typo.yml", "base_config: base.yml\nlora:\n  lora_rnak: 4\n");
  expect_error([&] { Config::load(dir / "configs/post_train/typo.yml", {"model_name=gemma4-e2b"}); },
               {"typo.yml", "unknown config key 'lora_rnak'", "lora_rank"});
  // A base_config that is neither beside the file nor above it.
  write_file(dir / "alone.yml", "base_config: missing.yml\n");
  expect_error([&] { Config::load(dir / "alone.yml", {}); },
               {"alone.yml", "base_config 'missing.yml' is not beside it"});
}

TEST(ConfigSft, DataOrderDefaultsAreMaxTexts) {
  const Config c = Config::defaults();
  EXPECT_EQ(c.get_string("grain_packing_type"), "first_fit");
  EXPECT_TRUE(c.get_bool("enable_data_shuffling"));
  EXPECT_EQ(c.get_int("data_shuffle_seed"), 0);
}

}  // namespace
}  // namespace gemmax
