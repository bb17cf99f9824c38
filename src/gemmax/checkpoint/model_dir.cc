#include "gemmax/checkpoint/model_dir.h"

#include <cstring>
#include <filesystem>

#include "gemmax/base/progress.h"
#include "gemmax/config/run_config.h"
#include "gemmax/checkpoint/hf_model.h"
#include "gemmax/checkpoint/train_checkpoint.h"
#include "gemmax/model/params.h"

namespace gemmax {
namespace fs = std::filesystem;

namespace {

LoadedModel load_hf_folder(const std::string& dir, DType dtype) {
  const HfModelFolder folder = read_hf_model_folder(dir);
  const ParamTable table(folder.config);
  LoadedModel m;
  m.config = folder.config;
  m.weights = Tensor::empty({table.total()}, dtype, MemKind::Params);
  m.note = load_hf_weights(table, folder, m.weights);
  m.source = "Hugging Face folder '" + dir + "'";
  return m;
}

LoadedModel load_checkpoint(const std::string& path, DType dtype) {
  const TrainCheckpoint ckpt = open_newest_train_checkpoint(path, CheckpointParts::kParams);
  const CheckpointRef& ref = ckpt.ref;
  LoadedModel m;
  m.checkpoint = ref;
  m.config = model_config_from(Config::from_json(ckpt.state.at("config"), ref.dir + "/state.json"));
  const ParamTable table(m.config);
  m.weights = Tensor::empty({table.total()}, dtype, MemKind::Params);
  Progress progress("loading " + ref.dir, double(ckpt.params.data_bytes()), "bytes");
  for (const ParamSpec& s : table.specs()) {
    if (!ckpt.params.has(s.name))
      fail("checkpoint '", ref.dir, "' has no parameter '", s.name, "'");
    if (ckpt.params.shape(s.name) != s.shape)
      fail("checkpoint '", ref.dir, "': '", s.name, "' has shape ",
           shape_str(ckpt.params.shape(s.name)), ", its config implies ", shape_str(s.shape));
    ckpt.params.read(s.name, 0, table.view(m.weights, s.name));
    refuse_nonfinite(table.view(m.weights, s.name),
                     str_cat("checkpoint '", ref.dir, "': parameter '", s.name, "'"));
    progress.add(double(ckpt.params.nbytes(s.name)));
  }
  progress.finish();
  m.source =
      str_cat("checkpoint '", ref.dir, "' (step ", ref.step,
              ckpt.ranks > 1 ? str_cat(", written by ", ckpt.ranks, " ranks") : std::string(), ")");
  return m;
}

}  // namespace

LoadedModel load_model_dir(const std::string& dir, DType dtype) {
  const AllocationScope what("the weights of model folder '" + dir + "'");
  if (!fs::is_directory(dir))
    fail("model folder '", dir,
         "' does not exist (expected a Hugging Face folder or a gemmax "
         "run / checkpoint folder)");
  if (fs::exists(fs::path(dir) / "config.json") && !fs::exists(fs::path(dir) / "checkpoints"))
    return load_hf_folder(dir, dtype);
  return load_checkpoint(dir, dtype);
}

}  // namespace gemmax
