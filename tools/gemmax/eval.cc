// gemmax eval [config.yml] [key=value ...] checkpoint=DIR | hf_dir=DIR: the eval loss of a train
// checkpoint or a Hugging Face folder, without training.
#include "gemmax/train/eval.h"

#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "gemmax/backend/backend_factory.h"
#include "gemmax/checkpoint/model_dir.h"
#include "gemmax/parallel/world.h"
#include "gemmax/train/memory_budget.h"

namespace gemmax {
namespace {

const char* kUsage =
    "usage: gemmax eval [config.yml] [key=value ...] checkpoint=DIR | hf_dir=DIR\n"
    "                   [--adapter DIR]\n"
    "\n"
    "Evaluates a model without training: eval_steps batches (-1: one pass) of the eval set,\n"
    "with the run's keys (configs/base.yml): eval_dataset_path (else the built-in corpus's\n"
    "held-out part), eval_per_device_batch_size, max_target_length, dtype, backend,\n"
    "sft_train_on_completion_only. Prints MaxText's eval/* figures as one JSON object.\n"
    "Runs the forward pass only (no gradients). Under mpirun (mpirun -np N gemmax eval ...)\n"
    "the N ranks hold FSDP shards of the model and each evaluates its rows of the global eval\n"
    "batch (eval_per_device_batch_size per rank); the figures are the global batch's.\n"
    "\n"
    "  checkpoint=DIR   a gemmax run folder, its checkpoints/ folder or one step_N folder\n"
    "  hf_dir=DIR       a Hugging Face Gemma-4 folder (config.json + safetensors)\n"
    "  --adapter DIR    a PEFT LoRA adapter folder on the model (hf_lora_adapter_path=DIR in\n"
    "                   a config); a LoRA run's checkpoint carries its adapters already\n"
    "\n"
    "Example:\n"
    "  gemmax eval checkpoint=out/gemmax_run eval_steps=-1\n"
    "  gemmax eval hf_dir=finetuned/ tokenizer_type=sentencepiece \\\n"
    "      tokenizer_path=finetuned/tokenizer.model eval_dataset_path=data/eval.bin\n";

void run_eval(const Config& config, const std::string& model_dir, std::string adapter, Comm& comm) {
  TrainConfig tc = train_config_from(config);
  // The adapter is evaluated, not trained: hf_lora_adapter_path names it as --adapter does.
  if (adapter.empty()) adapter = tc.lora.hf_lora_adapter_path;
  tc.lora = LoraConfig();
  const int ranks = comm.size();
  if (ranks > 1) {
    if (tc.backend.backend == BackendKind::Cuda)
      fail("gemmax eval on ", ranks, " ranks runs on the cpu and reference backends; evaluate "
           "with the cuda backend on one rank, or through a training run's eval_interval");
    comm.set_timeout(tc.parallel.comm_timeout_seconds);
  }
  // The model's shape is the folder's; dtypes, remat and tiling are the config's.
  MemoryPlanInput in = memory_plan_input(tc, ranks);
  LoadedModel m = load_model_dir(model_dir, in.weight);
  if (!adapter.empty()) attach_peft_adapter(m, adapter);
  in.model = m.config;
  in.fsdp_options = fsdp_options(tc.parallel, in.options.num_vocab_tiling, m.config, ranks,
                                 in.batch, in.seq, in.options.act, in.weight);
  const auto backend = make_backend(backend_options(tc));
  Gemma4Model model(m.config, *backend, in.options);
  TrainState state = make_eval_state(*backend, model.params(), in.weight, &comm, in.fsdp_options);
  upload_weights(*backend, model.params(), state, m.weights);
  std::unique_ptr<AdapterTable> adapters;
  if (m.lora) {  // the weights are the frozen base, the adapters on every rank whole
    adapters = std::make_unique<AdapterTable>(model.params(), m.lora->targets, m.lora->shape);
    state.base = {state.layout, state.weights};
    state.adapters = adapters.get();
    state.layout = ShardLayout::whole(adapters->params());
    state.weights = backend->to_device(m.lora->weights, MemKind::Params);
  }

  DataOptions data = run_data_options(tc, m.config.vocab_size, comm.rank(), ranks);
  Evaluator eval(tc, data);
  if (comm.rank() == 0)
    std::cerr << "gemmax eval: " << m.source << " (" << m.config.name << ")"
              << (m.lora ? " with the LoRA adapters of " + m.lora->source : "")
              << (ranks > 1 ? str_cat(" on ", ranks, " ranks") : "") << "\n"
              << "gemmax eval: " << eval.describe() << "\n";
  const EvalResult r = eval.run(*backend, model, state);
  if (comm.rank() != 0) return;
  const nlohmann::json j = {{"eval/avg_loss", r.avg_loss()},
                            {"eval/avg_perplexity", r.avg_perplexity()},
                            {"eval/total_loss", r.total_loss},
                            {"eval/total_weights", r.total_weights},
                            {"eval/moe_lb_loss", r.moe_lb_loss},
                            {"eval/avg_moe_lb_loss", r.avg_moe_lb_loss()},
                            {"eval/batches", r.batches}};
  std::cout << j.dump() << std::endl;
}

}  // namespace

int cmd_eval(int argc, char** argv) {
  if (argc > 0 && (!std::strcmp(argv[0], "--help") || !std::strcmp(argv[0], "-h"))) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  // checkpoint= and hf_dir= name the model; every other argument is the run's config.
  std::string model_dir, key, adapter;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--adapter" || a.starts_with("--adapter=")) {  // the PEFT folder on the model
      if (a == "--adapter" && i + 1 == argc) fail("gemmax eval: --adapter needs a folder");
      adapter = a == "--adapter" ? argv[++i] : a.substr(std::string("--adapter=").size());
      continue;
    }
    for (const char* k : {"checkpoint=", "hf_dir="}) {
      if (!a.starts_with(k)) continue;
      if (!model_dir.empty())
        fail("gemmax eval: ", key, " and ", k, " both given: evaluate one model at a time");
      key = k;
      model_dir = a.substr(key.size());
    }
    if (key.empty() || !a.starts_with(key)) rest.push_back(argv[i]);
  }
  if (model_dir.empty())
    fail("gemmax eval: no model given: add checkpoint=RUN_OR_STEP_DIR or hf_dir=HF_DIR (see "
         "gemmax eval --help)");
  const Config config = config_from_args(int(rest.size()), rest.data());
  // Under an MPI launcher every rank runs this; an error on one rank ends them all.
  std::unique_ptr<Comm> world = make_world(&argc, &argv);
  try {
    run_eval(config, model_dir, adapter, *world);
  } catch (const std::exception& e) {
    if (world->size() == 1) throw;
    std::fprintf(stderr, "error: rank %d of %d: %s\n", world->rank(), world->size(), e.what());
    std::fflush(stderr);
    world->abort(1);
  }
  return 0;
}

}  // namespace gemmax
