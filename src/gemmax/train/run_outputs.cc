#include "gemmax/train/run_outputs.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "gemmax/base/strings.h"
#include "gemmax/data/hf_dataset.h"
#include "gemmax/io/no_clobber.h"
#include "gemmax/train/metrics.h"

namespace gemmax {
namespace fs = std::filesystem;

void refuse_run_outputs_over_inputs(const TrainConfig& c, const std::string& run_dir) {
  const fs::path dir(run_dir);
  const MetricsOptions m = metrics_options(c.run, run_dir);
  const std::vector<PathRole> outputs = {
      {(dir / "config.yml").string(), "the run's config.yml"},
      {m.jsonl_path, "the run's metrics.jsonl"},
      {(dir / "memory.json").string(), "the run's memory.json"},
      {(dir / "gemmax.lock").string(), "the run's lock file"},
      {(dir / "checkpoints").string(), "the run's checkpoints folder", true},
      {m.tensorboard_dir,
       c.run.tensorboard_dir.empty() ? "the run's TensorBoard folder" : "tensorboard_dir", true},
      {(dir / "adapter").string(), "the run's PEFT adapter folder", true},
      {(dir / "adapter.tmp").string(), "the run's PEFT adapter folder (being written)", true},
  };
  std::vector<PathRole> inputs;
  auto add_list = [&](const std::string& spec, const char* key) {  // a comma-separated list
    for (size_t begin = 0; begin <= spec.size();) {
      const size_t end = std::min(spec.find(',', begin), spec.size());
      inputs.push_back({spec.substr(begin, end - begin), key});
      begin = end + 1;
    }
  };
  if (c.data.dataset_type == DatasetType::Shards) add_list(c.data.dataset_path, "dataset_path");
  add_list(c.eval.eval_dataset_path, "eval_dataset_path");
  inputs.push_back({c.data.hf_path, "hf_path"});
  if (c.data.dataset_type == DatasetType::Hf) {
    // The files of each split read: hf_*_files may name them outside hf_path, and a folder's
    // may be links to elsewhere (a hub download's blobs).
    HfSplitSpec train{c.data.hf_path, c.data.hf_data_dir, c.data.hf_train_files,
                      c.data.train_split};
    for (const std::string& f : hf_split_files(train))
      inputs.push_back(
          {f, c.data.hf_train_files.empty() ? "train_split's file" : "hf_train_files"});
    if (c.eval.eval_interval >= 0 && c.eval.eval_dataset_path.empty() &&
        (!c.eval.hf_eval_files.empty() || !c.eval.hf_eval_split.empty())) {
      HfSplitSpec eval{c.data.hf_path,       c.data.hf_data_dir, c.eval.hf_eval_files,
                       c.eval.hf_eval_split, "hf_eval_files",    "hf_eval_split"};
      for (const std::string& f : hf_split_files(eval))
        inputs.push_back(
            {f, c.eval.hf_eval_files.empty() ? "hf_eval_split's file" : "hf_eval_files"});
    }
  }
  inputs.push_back({c.data.tokenizer_path, "tokenizer_path"});
  // A tokenizer file's special tokens and chat template are read from the files beside it.
  std::error_code ec;
  if (!c.data.tokenizer_path.empty() && !fs::is_directory(c.data.tokenizer_path, ec))
    for (const char* f :
         {"tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"})
      inputs.push_back({(fs::path(c.data.tokenizer_path).parent_path() / f).string(),
                        str_cat("tokenizer_path's ", f)});
  inputs.push_back({c.data.chat_template_path, "chat_template_path"});
  inputs.push_back({c.run.load_parameters_path, "load_parameters_path"});
  inputs.push_back({c.lora.lora_restore_path, "lora_restore_path"});
  inputs.push_back({c.lora.hf_lora_adapter_path, "hf_lora_adapter_path"});
  refuse_outputs_over_inputs(outputs, inputs);
}

}  // namespace gemmax
