#include "gemmax/checkpoint/model_dir.h"

#include <cstring>
#include <filesystem>

#include "gemmax/base/convert.h"
#include "gemmax/base/crc32c.h"
#include "gemmax/base/progress.h"
#include "gemmax/checkpoint/hf_model.h"
#include "gemmax/checkpoint/peft_adapter.h"
#include "gemmax/checkpoint/train_checkpoint.h"
#include "gemmax/config/run_config.h"
#include "gemmax/model/lora/nf4_base.h"
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
  m.hf_prefix = folder.info.weight_prefix;
  return m;
}

// A LoRA run's checkpoint: its base, as the run loaded it, and its adapters.
LoadedModel load_lora_checkpoint(const TrainCheckpoint& ckpt, const Config& config, DType dtype) {
  const CheckpointRef& ref = ckpt.ref;
  const nlohmann::json& lora = ckpt.state.at("lora");
  const std::string base_dir = config.get_string("load_parameters_path");
  const DType base_dtype = parse_dtype(lora.at("base_dtype").get<std::string>());
  LoadedModel m;
  if (base_dir.empty()) {  // initialised from the run's seed
    m.config = model_config_from(config);
    const ParamTable table(m.config);
    m.weights = Tensor::zeros({table.total()}, base_dtype, MemKind::Params);
    init_params(table, m.weights, uint64_t(config.get_int("init_weights_seed")));
  } else {
    m = load_model_dir(base_dir, base_dtype);
    m.weights = merged_weights(m);  // a base that is itself a LoRA run's: merged, as the run took
    m.lora.reset();
  }
  if (crc32c(m.weights.raw(), m.weights.nbytes()) != lora.at("base_crc32c").get<uint32_t>())
    fail("checkpoint '", ref.dir, "' holds adapters trained on the base '", base_dir,
         "', which has other weights now (CRC-32C of its ", dtype_name(base_dtype),
         " weights differs): the adapters would compute another model");
  // QLoRA: the adapters were trained against the NF4 base's values.
  if (const int64_t block = lora.value("nf4_block", int64_t(0)); block > 0)
    m.weights = nf4_round_trip(ParamTable(m.config), m.weights, block, base_dtype);
  if (base_dtype != dtype) {
    Tensor w = Tensor::empty(m.weights.shape(), dtype, MemKind::Params);
    convert_into(m.weights, w);
    m.weights = w;
  }
  const ParamTable table(m.config);
  LoadedAdapters a;
  a.shape = {lora.at("rank").get<int64_t>(), lora.at("alpha").get<double>(),
             lora.at("rslora").get<bool>(), 0.0};
  for (const LoraTarget& t : AdapterTable::candidates(table))
    if (ckpt.params.has(t.a_name)) a.targets.push_back(t);
  const AdapterTable adapters(table, a.targets, a.shape);
  a.weights = Tensor::empty({adapters.params().total()}, dtype, MemKind::Params);
  for (const ParamSpec& s : adapters.params().specs()) {
    if (!ckpt.params.has(s.name) || ckpt.params.shape(s.name) != s.shape)
      fail("checkpoint '", ref.dir, "': adapter '", s.name,
           "' is missing or has another shape "
           "than its base and rank imply (",
           shape_str(s.shape), ")");
    ckpt.params.read(s.name, 0, adapters.params().view(a.weights, s.name));
  }
  a.source = str_cat("the LoRA checkpoint '", ref.dir, "' (step ", ref.step, ")");
  m.lora = a;
  m.base_source = base_dir;
  m.source = str_cat("the frozen base ",
                     base_dir.empty() ? "initialised from the run's seed" : "'" + base_dir + "'",
                     " with the adapters of ", a.source);
  m.checkpoint = ref;
  return m;
}

LoadedModel load_checkpoint(const std::string& path, DType dtype) {
  const TrainCheckpoint ckpt = open_newest_train_checkpoint(path, CheckpointParts::kParams);
  const CheckpointRef& ref = ckpt.ref;
  const Config config = Config::from_json(ckpt.state.at("config"), ref.dir + "/state.json");
  if (ckpt.state.contains("lora")) return load_lora_checkpoint(ckpt, config, dtype);
  LoadedModel m;
  m.checkpoint = ref;
  m.config = model_config_from(config);
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

void attach_peft_adapter(LoadedModel& m, const std::string& adapter) {
  if (m.lora)
    fail("--adapter '", adapter, "' on ", m.source,
         ", which carries adapters already: give the "
         "LoRA run's checkpoint alone, or export it merged (gemmax export --merge_lora) first");
  const ParamTable table(m.config);
  const PeftAdapter a = read_peft_adapter(adapter, table, m.weights.dtype());
  m.lora = LoadedAdapters{a.targets, a.shape, a.weights, "the PEFT adapter '" + adapter + "'"};
}

Tensor merged_weights(const LoadedModel& m) {
  if (!m.lora) return m.weights;
  const ParamTable table(m.config);
  const AdapterTable adapters(table, m.lora->targets, m.lora->shape);
  Tensor w = Tensor::empty(m.weights.shape(), m.weights.dtype(), MemKind::Params);
  std::memcpy(w.raw(), m.weights.raw(), m.weights.nbytes());
  merge_adapters(adapters, m.lora->weights, w);
  return w;
}

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
