#include "gemmax/train/lora_setup.h"

#include <map>

#include "gemmax/base/error.h"
#include "gemmax/base/strings.h"
#include "gemmax/checkpoint/peft_adapter.h"

namespace gemmax {

std::string lora_adapter_source(const LoraConfig& c) {
  return !c.lora_restore_path.empty() ? c.lora_restore_path : c.hf_lora_adapter_path;
}

std::optional<LoraOptions> lora_options(const TrainConfig& config) {
  const LoraConfig& c = config.lora;
  const std::string adapter = lora_adapter_source(c);
  if (!c.enable_lora) {
    if (!adapter.empty())
      fail(c.lora_restore_path.empty() ? "hf_lora_adapter_path" : "lora_restore_path", "='",
           adapter,
           "' with enable_lora=false: set enable_lora=true to train the adapter further "
           "(or fold it into the model with `gemmax export --adapter DIR --merge_lora`)");
    if (c.lora_weight_qtype != LoraWeightQtype::None)
      fail(
          "lora_weight_qtype=nf4 (QLoRA) needs enable_lora=true: only a LoRA run's frozen base "
          "is quantised");
    return std::nullopt;
  }
  if (!config.run.freeze.empty())
    fail("freeze='", config.run.freeze,
         "' with enable_lora=true: a LoRA run freezes the whole "
         "base and trains only its adapters; drop freeze");
  LoraOptions o;
  o.targeting.module_path = c.lora_module_path;
  o.targeting.target_modules = split_list(c.lora_target_modules);
  o.targeting.target_parameters = split_list(c.lora_target_parameters);
  o.shape = {c.lora_rank, c.lora_alpha, c.use_rslora, c.lora_dropout};
  o.qtype = c.lora_weight_qtype;
  o.nf4_block = c.lora_tile_size;
  if (o.nf4_block % 2 != 0)
    fail("lora_tile_size=", o.nf4_block,
         ": NF4 packs two elements a byte, so a block holds an "
         "even number of them (bitsandbytes' are 64)");
  if (adapter.empty()) return o;

  // The adapter sets the targets and the shape; the run's keys may repeat them, not change them.
  const ParamTable base(config.model);
  const PeftAdapter a = read_peft_adapter(adapter, base, DType::F32);
  const char* key = c.lora_restore_path.empty() ? "hf_lora_adapter_path" : "lora_restore_path";
  if (c.lora_rank != 0 && c.lora_rank != a.shape.rank)
    fail("lora_rank=", c.lora_rank, " but ", key, "='", adapter, "' is an adapter of rank ",
         a.shape.rank, " (", kPeftConfigFile, " r); set lora_rank=", a.shape.rank,
         " or leave it 0");
  if (c.lora_alpha != 0 && c.lora_alpha != a.shape.alpha)
    fail("lora_alpha=", c.lora_alpha, " but ", key, "='", adapter, "' has lora_alpha ",
         a.shape.alpha, "; set lora_alpha=", a.shape.alpha, " or leave it 0");
  if (c.use_rslora != a.shape.rslora)
    fail("use_rslora=", c.use_rslora ? "true" : "false", " but ", key, "='", adapter,
         "' has use_rslora ", a.shape.rslora ? "true" : "false", "; set use_rslora=",
         a.shape.rslora ? "true" : "false", " (the adapter's scale is alpha / ",
         a.shape.rslora ? "sqrt(r)" : "r", ")");
  if (!c.lora_module_path.empty() || o.targeting.peft())
    fail("lora_module_path / lora_target_modules / lora_target_parameters with ", key,
         ": the adapter's own tensors say "
         "which matrices it adapts; drop the selection keys");
  o.shape.rank = a.shape.rank;
  o.shape.alpha = a.shape.alpha;
  o.targets = a.targets;
  return o;
}

std::string describe_adapters(const AdapterTable& adapters, const LoraConfig& c) {
  const LoraShape& s = adapters.shape();
  std::map<std::string, int> kinds;  // q_proj: 30, experts.gate_up_proj: 30, ...
  for (const LoraTarget& t : adapters.targets()) {
    const std::string leaf =
        t.parameter.empty() ? t.module.substr(t.module.rfind('.') + 1) : "experts." + t.parameter;
    kinds[leaf == "proj" ? "router.proj" : leaf]++;
  }
  std::string list;
  for (const auto& [k, n] : kinds) list += str_cat(list.empty() ? "" : ", ", k, " x", n);
  const std::string source = lora_adapter_source(c);
  const std::string how = !source.empty() ? "the adapter's own"
                          : !c.lora_target_modules.empty() || !c.lora_target_parameters.empty()
                              ? "PEFT's lora_target_modules / lora_target_parameters"
                          : c.lora_module_path.empty()
                              ? "lora_module_path: MaxText's gemma4 default"
                              : "lora_module_path='" + c.lora_module_path + "'";
  return str_cat("LoRA rank ", s.rank, ", alpha ", s.alpha, " (scale ", s.scale(),
                 s.rslora ? ", rsLoRA" : "", s.dropout > 0 ? str_cat(", dropout ", s.dropout) : "",
                 ") on ", adapters.targets().size(), " matrices (", how, "): ", list,
                 c.lora_weight_qtype == LoraWeightQtype::Nf4
                     ? str_cat(" | base in NF4 blocks of ", c.lora_tile_size)
                     : std::string(" | base frozen in the compute dtype"));
}

}  // namespace gemmax
