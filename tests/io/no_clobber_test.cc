// Outputs never clobber inputs, for every command: the same path, a symlink to it, a folder
// symlinked on the way, a hard link, a path inside an input model folder. Each refusal is an
// error naming both paths, and the input is left byte for byte as it was.
#include <gtest/gtest.h>

#include <filesystem>

#include "gemmax/io/no_clobber.h"
#include "gemmax/checkpoint/train_checkpoint.h"
#include "test_util.h"

namespace gemmax {
namespace {
namespace fs = std::filesystem;
using testing::expect_error;
using testing::run_command;
using testing::TempDir;

using Result = testing::CliResult;
constexpr auto& gemmax = testing::run_gemmax;

// Runs the command, expects a refusal naming `parts`, and the file `input` unchanged.
void expect_refused(const std::string& args, const std::string& input,
                    const std::vector<std::string>& parts) {
  const std::string before = testing::read_file(input);
  const Result r = gemmax(args);
  EXPECT_EQ(r.status, 1) << args << "\n" << r.out;
  for (const std::string& p : parts)
    EXPECT_NE(r.out.find(p), std::string::npos) << "missing '" << p << "' for: " << args << "\n" << r.out;
  EXPECT_EQ(testing::read_file(input), before) << args << " changed " << input;
}

TEST(NoClobber, PathsResolveThroughSymlinksHardLinksAndFolders) {
  TempDir dir;
  fs::create_directories(dir / "model");
  testing::write_file(dir / "model/w.safetensors", "weights");
  testing::write_file(dir / "data.bin", "tokens");
  fs::create_symlink(dir / "model/w.safetensors", dir / "link.safetensors");
  fs::create_directory_symlink(dir / "model", dir / "alias");
  fs::create_hard_link(dir / "data.bin", dir / "hard.bin");
  const std::vector<PathRole> in = {{dir / "model", "--model"}, {dir / "data.bin", "--tokens"}};
  auto refuse = [&](const std::string& out, bool folder = false) {
    refuse_outputs_over_inputs({{out, "--out", folder}}, in);
  };
  expect_error([&] { refuse(dir / "model"); }, {"--out", "is the input", "--model"});
  expect_error([&] { refuse(dir / "model/w.safetensors"); }, {"inside the input folder", "--model"});
  expect_error([&] { refuse(dir / "model/new.safetensors"); }, {"inside the input folder"});
  expect_error([&] { refuse(dir / "link.safetensors"); }, {"inside the input folder"});
  expect_error([&] { refuse(dir / "alias/new/x.safetensors"); }, {"inside the input folder"});
  expect_error([&] { refuse(dir / "data.bin"); }, {"is the input", "--tokens"});
  expect_error([&] { refuse(dir / "hard.bin"); }, {"is the input", "--tokens"});
  expect_error([&] { refuse(dir / "./sub/../data.bin"); }, {"is the input"});
  expect_error([&] { refuse(dir.str(), true); }, {"lies inside the output folder"});
  expect_error([&] {
    refuse_outputs_over_inputs({{dir / "g.bin", "--out"}, {dir / "./g.bin", "--logits"}}, in);
  }, {"the outputs", "--out", "--logits", "the same file"});
  // Beside the inputs is fine, and so is a folder output that holds none of them.
  refuse(dir / "grads.safetensors");
  refuse(dir / "export", true);
  refuse_outputs_over_inputs({{dir / "x", "--out"}}, {{"", "--tokenizer_path"}});
}

TEST(NoClobber, GradNeverWritesOverTheModelOrTheTokens) {
  TempDir dir;
  fs::create_directories(dir / "hf");
  testing::write_file(dir / "hf/model.safetensors", "the model's weights");
  testing::write_file(dir / "t.bin", std::string(16, '\0'));
  fs::create_symlink(dir / "hf/model.safetensors", dir / "link.safetensors");
  fs::create_directory_symlink(dir / "hf", dir / "alias");
  const std::string base = "grad --model " + dir / "hf" + " --tokens " + dir / "t.bin" + " --batch 1";
  expect_refused(base + " --out " + dir / "hf/model.safetensors", dir / "hf/model.safetensors",
                 {"--out", "inside the input folder", "--model"});
  expect_refused(base + " --out " + dir / "link.safetensors", dir / "hf/model.safetensors",
                 {"--out", "--model"});
  expect_refused(base + " --out " + dir / "alias/grads.safetensors", dir / "hf/model.safetensors",
                 {"inside the input folder"});
  expect_refused(base + " --out " + dir / "g.safetensors --logits " + dir / "t.bin", dir / "t.bin",
                 {"--logits", "is the input", "--tokens"});
  EXPECT_FALSE(fs::exists(dir / "g.safetensors"));
}

TEST(NoClobber, TokenizeNeverWritesOverItsInputs) {
  TempDir dir;
  testing::write_file(dir / "corpus.jsonl", "{\"text\": \"hello\"}\n");
  fs::create_symlink(dir / "corpus.jsonl", dir / "link.jsonl");
  expect_refused("tokenize --out " + dir / "corpus.jsonl " + dir / "corpus.jsonl",
                 dir / "corpus.jsonl", {"--out", "is the input", "corpus.jsonl"});
  expect_refused("tokenize --out " + dir / "link.jsonl " + dir / "corpus.jsonl",
                 dir / "corpus.jsonl", {"--out", "is the input"});
  // A dataset's files, named by --hf_files or reached through a link in an --hf_path folder
  // (a hub download's files are links to its blobs).
  expect_refused("tokenize --out " + dir / "corpus.jsonl --hf_files " + dir / "corpus.jsonl",
                 dir / "corpus.jsonl", {"--out", "is the input", "--hf_files"});
  fs::create_directories(dir / "ds");
  fs::create_symlink(dir / "corpus.jsonl", dir / "ds/train.jsonl");
  expect_refused("tokenize --out " + dir / "corpus.jsonl --hf_path " + dir / "ds",
                 dir / "corpus.jsonl", {"--out", "is the input", "--hf_path's file"});
  // Beside it: written.
  const Result ok = gemmax("tokenize --out " + dir / "corpus.bin " + dir / "corpus.jsonl");
  EXPECT_EQ(ok.status, 0) << ok.out;
}

TEST(NoClobber, TrainNeverWritesIntoItsInputs) {
  TempDir dir;
  fs::create_directories(dir / "hf");
  testing::write_file(dir / "hf/config.json", "{}");
  // The run folder inside the folder it fine-tunes from.
  expect_refused("train load_parameters_path=" + dir / "hf" + " base_output_directory=" + dir / "hf",
                 dir / "hf/config.json", {"load_parameters_path", "inside the input folder"});
  // A data shard where the run writes its metrics.
  fs::create_directories(dir / "out/r");
  testing::write_file(dir / "out/r/metrics.jsonl", "shard bytes");
  expect_refused("train dataset_type=shards dataset_path=" + dir / "out/r/metrics.jsonl" +
                     " base_output_directory=" + dir / "out run_name=r",
                 dir / "out/r/metrics.jsonl", {"metrics.jsonl", "dataset_path", "is the input"});
  // An input inside the checkpoints folder, which the run prunes.
  fs::create_directories(dir / "out/r/checkpoints");
  testing::write_file(dir / "out/r/checkpoints/tokenizer.model", "spm");
  expect_refused("train tokenizer_type=sentencepiece tokenizer_path=" +
                     dir / "out/r/checkpoints/tokenizer.model" + " base_output_directory=" +
                     dir / "out run_name=r",
                 dir / "out/r/checkpoints/tokenizer.model", {"tokenizer_path", "checkpoints"});
  // Every other file the run reads: the eval shards, a dataset's files (named, or reached
  // through a link in hf_path), the chat template, the files beside a tokenizer file.
  const std::string run = " base_output_directory=" + dir / "out run_name=r";
  const std::string metrics = dir / "out/r/metrics.jsonl";
  expect_refused("train eval_dataset_path=" + dir / "t.bin," + metrics + run, metrics,
                 {"metrics.jsonl", "eval_dataset_path", "is the input"});
  expect_refused("train dataset_type=hf hf_train_files=" + metrics + run, metrics,
                 {"metrics.jsonl", "hf_train_files", "is the input"});
  testing::write_file(dir / "train.jsonl", "{\"text\": \"hello\"}\n");
  expect_refused("train dataset_type=hf hf_train_files=" + dir / "train.jsonl" +
                     " hf_eval_files=" + metrics + run,
                 metrics, {"metrics.jsonl", "hf_eval_files", "is the input"});
  fs::create_directories(dir / "ds");
  fs::create_symlink(metrics, dir / "ds/train.jsonl");
  expect_refused("train dataset_type=hf hf_path=" + dir / "ds" + run, metrics,
                 {"metrics.jsonl", "train_split's file", "is the input"});
  testing::write_file(dir / "out/r/config.yml", "{% for m in messages %}{% endfor %}");
  expect_refused("train chat_template_path=" + dir / "out/r/config.yml" + run,
                 dir / "out/r/config.yml", {"config.yml", "chat_template_path", "is the input"});
  fs::create_directories(dir / "tok");
  testing::write_file(dir / "tok/chat_template.jinja", "{{ messages }}");
  expect_refused("train tokenizer_path=" + dir / "tok/tokenizer.json" +
                     " tensorboard_dir=" + dir / "tok/chat_template.jinja" + run,
                 dir / "tok/chat_template.jinja",
                 {"tensorboard_dir", "tokenizer_path's chat_template.jinja", "is the input"});
  // The PEFT adapter a LoRA run continues, where the same run_name writes its own adapter
  // folder: an earlier run's, its checkpoints gone (so the new run starts afresh).
  const std::string lora = " enable_lora=true lora_rank=2 lora_alpha=4 steps=1 "
                           "sample_max_new_tokens=0 base_output_directory=" + dir / "lo run_name=r";
  ASSERT_EQ(gemmax("train" + lora).status, 0);
  fs::remove_all(dir / "lo/r/checkpoints");
  expect_refused("train hf_lora_adapter_path=" + dir / "lo/r/adapter" + lora,
                 dir / "lo/r/adapter/adapter_model.safetensors",
                 {"hf_lora_adapter_path", "PEFT adapter folder"});
}

TEST(NoClobber, ExportNeverWritesIntoTheCheckpoint) {
  TempDir dir;
  const Result t = gemmax("train base_output_directory=" + dir.str() +
                          " run_name=r steps=1 base_emb_dim=32 max_target_length=16 "
                          "per_device_batch_size=1 sample_max_new_tokens=0");
  ASSERT_EQ(t.status, 0) << t.out;
  const std::vector<CheckpointRef> saved = list_train_checkpoints(dir / "r/checkpoints");
  ASSERT_EQ(saved.size(), 1u);
  const std::string step = saved[0].dir, state = step + "/state.json";
  ASSERT_TRUE(fs::exists(state));
  expect_refused("export --checkpoint " + dir / "r --out " + step, state, {"--out", "--checkpoint"});
  expect_refused("export --checkpoint " + dir / "r --out " + dir / "r", state,
                 {"--out", "--checkpoint"});
  expect_refused("export --checkpoint " + step + " --out " + dir / "r/checkpoints", state,
                 {"lies inside the output folder"});
  const Result ok = gemmax("export --checkpoint " + dir / "r --out " + dir / "hf");
  EXPECT_EQ(ok.status, 0) << ok.out;
}

TEST(NoClobber, BenchJsonIsCheckedBeforeTimingAndWrittenAtomically) {
  TempDir dir;
  testing::write_file(dir / "run.yml", "steps: 3\n");
  expect_refused("bench " + dir / "run.yml --json " + dir / "run.yml", dir / "run.yml",
                 {"--json", "is the input", "the config file"});
  const Result missing = gemmax("bench --json /nonexistent/x.json");
  EXPECT_EQ(missing.status, 1) << missing.out;
  EXPECT_NE(missing.out.find("/nonexistent"), std::string::npos) << missing.out;
  EXPECT_EQ(missing.out.find("wrote"), std::string::npos) << missing.out;
}

TEST(NoClobber, AFailedWriteOfTheOutputIsAnError) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  Result r;
  r.status = run_command(std::string("{ ") + GEMMAX_BINARY + " info > /dev/full; }", &r.out);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("writing the standard output failed"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace gemmax
