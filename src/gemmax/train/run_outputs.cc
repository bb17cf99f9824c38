#include "gemmax/train/run_outputs.h"

#include <algorithm>
#include <filesystem>
#include <vector>

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
  };
  std::vector<PathRole> inputs;
  if (c.data.dataset_type == DatasetType::Shards) {
    const std::string& spec = c.data.dataset_path;  // one path or a comma-separated list
    for (size_t begin = 0; begin <= spec.size();) {
      const size_t end = std::min(spec.find(',', begin), spec.size());
      inputs.push_back({spec.substr(begin, end - begin), "dataset_path"});
      begin = end + 1;
    }
  }
  inputs.push_back({c.data.hf_path, "hf_path"});
  inputs.push_back({c.data.tokenizer_path, "tokenizer_path"});
  inputs.push_back({c.run.load_parameters_path, "load_parameters_path"});
  refuse_outputs_over_inputs(outputs, inputs);
}

}  // namespace gemmax
