// gemmax export: a train-state checkpoint -> a Hugging Face Gemma-4 folder.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "flags.h"
#include "gemmax/io/hf_checkpoint.h"
#include "gemmax/io/hf_config.h"
#include "gemmax/checkpoint/hf_model.h"
#include "gemmax/checkpoint/model_dir.h"
#include "gemmax/io/no_clobber.h"
#include "gemmax/checkpoint/train_checkpoint.h"

namespace gemmax {
namespace {

const char* kUsage =
    "usage: gemmax export --checkpoint DIR --out HF_DIR [--dtype bfloat16|float32]\n"
    "                     [--max_shard_gb 5]\n"
    "\n"
    "Writes the weights of a train-state checkpoint as a Hugging Face Gemma-4 folder\n"
    "(config.json + safetensors, sharded above --max_shard_gb) that gemmax and transformers\n"
    "(AutoModelForCausalLM) load. DIR is a checkpoint folder (.../checkpoints/step_N), a\n"
    "checkpoints/ folder or a run folder; the last two mean their newest checkpoint.\n"
    "--dtype defaults to bfloat16, the released models' dtype.\n";

}  // namespace

int cmd_export(int argc, char** argv) {
  const Flags flags("export", argc, argv, {{"checkpoint"}, {"out"}, {"dtype"}, {"max_shard_gb"}});
  if (flags.help()) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const CheckpointRef ref = find_train_checkpoint(flags.get("checkpoint"));
  const std::string out = flags.get("out");
  std::vector<PathRole> inputs = {{ref.dir, "--checkpoint"}, {flags.get("checkpoint"), "--checkpoint"}};
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
  const LoadedModel m = load_model_dir(flags.get("checkpoint"), DType::F32);
  const ParamTable table(m.config);
  const NamedTensors tensors = hf_named_tensors(table, m.weights, "model.", dtype);
  write_hf_checkpoint(out, tensors, uint64_t(shard_gb * double(1ull << 30)));
  write_hf_config(m.config, dtype, out + "/config.json");
  std::cout << "gemmax: exported " << m.checkpoint.dir << " (step " << m.checkpoint.step << ", "
            << table.total()
            << " parameters) to " << out << " as " << dtype_name(dtype) << "\n";
  return 0;
}

}  // namespace gemmax
