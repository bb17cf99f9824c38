// gemmax export: a train-state checkpoint -> a Hugging Face Gemma-4 folder.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "flags.h"
#include "gemmax/checkpoint/hf_model.h"
#include "gemmax/checkpoint/model_dir.h"
#include "gemmax/checkpoint/peft_adapter.h"
#include "gemmax/checkpoint/train_checkpoint.h"
#include "gemmax/io/hf_checkpoint.h"
#include "gemmax/io/hf_config.h"
#include "gemmax/io/no_clobber.h"

namespace gemmax {
namespace {

const char* kUsage =
    "usage: gemmax export --checkpoint DIR --out OUT_DIR [--merge_lora] [--adapter DIR]\n"
    "                     [--dtype bfloat16|float32] [--max_shard_gb 5]\n"
    "\n"
    "Writes the weights of a train-state checkpoint as a Hugging Face Gemma-4 folder\n"
    "(config.json + safetensors, sharded above --max_shard_gb) that gemmax and transformers\n"
    "(AutoModelForCausalLM) load. DIR is a checkpoint folder (.../checkpoints/step_N), a\n"
    "checkpoints/ folder or a run folder; the last two mean their newest checkpoint.\n"
    "--dtype defaults to bfloat16, the released models' dtype.\n"
    "\n"
    "A LoRA run's checkpoint is written as a PEFT adapter folder (adapter_config.json +\n"
    "adapter_model.safetensors, which PeftModel.from_pretrained loads on the run's base);\n"
    "with --merge_lora, as the Hugging Face folder of the base with the adapters folded in\n"
    "(W + s B A, PEFT's merge_and_unload). --adapter DIR folds a PEFT adapter folder into\n"
    "DIR's model (a Hugging Face folder or a checkpoint): it needs --merge_lora.\n";

}  // namespace

int cmd_export(int argc, char** argv) {
  const Flags flags(
      "export", argc, argv,
      {{"checkpoint"}, {"out"}, {"dtype"}, {"max_shard_gb"}, {"adapter"}, {"merge_lora", false}});
  if (flags.help()) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const std::string source = flags.get("checkpoint"), out = flags.get("out");
  const bool hf_source = std::filesystem::exists(std::filesystem::path(source) / "config.json") &&
                         !std::filesystem::exists(std::filesystem::path(source) / "checkpoints");
  const CheckpointRef ref = hf_source ? CheckpointRef{0, source} : find_train_checkpoint(source);
  std::vector<PathRole> inputs = {{ref.dir, "--checkpoint"}, {source, "--checkpoint"}};
  if (flags.has("adapter")) inputs.push_back({flags.get("adapter"), "--adapter"});
  // The model the run started from: exporting over it would replace the base model.
  if (std::ifstream in(ref.dir + "/state.json"); in) {
    const nlohmann::json state = nlohmann::json::parse(in, nullptr, false);
    if (state.is_object() && state.contains("config") && state["config"].is_object()) {
      const nlohmann::json& base = state["config"].value("load_parameters_path", nlohmann::json());
      if (base.is_string() && !base.get<std::string>().empty())
        inputs.push_back({base.get<std::string>(), "the run's load_parameters_path"});
    }
  }
  refuse_outputs_over_inputs({{out, "--out", true}}, inputs);
  const DType dtype = parse_dtype(flags.get("dtype", "bfloat16"));
  if (dtype != DType::BF16 && dtype != DType::F32)
    fail("gemmax export: --dtype must be bfloat16 or float32, got ", flags.get("dtype"));
  const double shard_gb = flags.get_double("max_shard_gb", 5.0);
  if (!(shard_gb > 0 && shard_gb <= 1e6))
    fail("gemmax export: --max_shard_gb=", flags.get("max_shard_gb"),
         " is outside its valid range (0, 1000000] (GiB per safetensors file)");

  // The newest checkpoint again: a live run may have rotated `ref` away since.
  LoadedModel m = load_model_dir(source, DType::F32);
  const bool merge = flags.has("merge_lora");
  if (flags.has("adapter")) {
    if (!merge)
      fail("gemmax export: --adapter '", flags.get("adapter"),
           "' is a PEFT folder already; "
           "add --merge_lora to fold it into the model's weights");
    attach_peft_adapter(m, flags.get("adapter"));
  }
  if (merge && !m.lora)
    fail("gemmax export: --merge_lora, but ", m.source,
         " carries no LoRA adapters (give a LoRA "
         "run's checkpoint, or --adapter DIR)");
  const ParamTable table(m.config);
  if (m.lora && !merge) {
    const AdapterTable adapters(table, m.lora->targets, m.lora->shape);
    write_peft_adapter(out, adapters, m.lora->weights, m.base_source, m.hf_prefix);
    std::cout << "gemmax: exported the LoRA adapters of " << m.checkpoint.dir << " (step "
              << m.checkpoint.step << ", rank " << m.lora->shape.rank << " on "
              << m.lora->targets.size() << " matrices) to " << out
              << " as a PEFT adapter folder on the base '" << m.base_source << "'\n";
    return 0;
  }
  const NamedTensors tensors = hf_named_tensors(table, merged_weights(m), "model.", dtype);
  write_hf_checkpoint(out, tensors, uint64_t(shard_gb * double(1ull << 30)));
  write_hf_config(m.config, dtype, out + "/config.json");
  std::cout << "gemmax: exported " << (hf_source ? source : m.checkpoint.dir)
            << (hf_source ? std::string() : str_cat(" (step ", m.checkpoint.step, ")")) << ", "
            << table.total() << " parameters"
            << (m.lora ? " with the adapters of " + m.lora->source + " merged" : std::string())
            << ", to " << out << " as " << dtype_name(dtype) << "\n";
  return 0;
}

}  // namespace gemmax
