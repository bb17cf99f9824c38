// gemmax grad: one batch's loss and the gradient of every parameter of a Hugging Face
// Gemma-4 folder, for checking a port or a checkpoint against another implementation.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "flags.h"
#include "gemmax/backend/backend.h"
#include "gemmax/backend/backend_factory.h"
#include "gemmax/checkpoint/hf_model.h"
#include "gemmax/checkpoint/peft_adapter.h"
#include "gemmax/io/no_clobber.h"
#include "gemmax/model/gemma4.h"
#include "gemmax/model/head.h"
#include "gemmax/model/lora/lora_params.h"

namespace gemmax {
namespace {

const char* kUsage =
    "usage: gemmax grad --model DIR [--adapter DIR] --tokens FILE --batch B\n"
    "                   --out GRADS.safetensors [--logits LOGITS.safetensors]\n"
    "                   [--dtype float32|float64]\n"
    "                   [--load_balance_loss_weight W] [--backend reference|cpu]\n"
    "\n"
    "Computes one batch's loss and the gradient of total_loss = ce_loss + lb_loss with respect\n"
    "to every parameter of the Hugging Face Gemma-4 folder DIR (config.json + safetensors).\n"
    "  --tokens   little-endian int32 file of shape [B, S+1]: inputs are [:, :-1], targets\n"
    "             [:, 1:]; one document per row; every target counts (id 0 included)\n"
    "  --out      gradients under the folder's own tensor names, in --dtype (default float32)\n"
    "  --adapter  a PEFT LoRA adapter folder on the model: the gradients are then its\n"
    "             adapters', under PEFT's names (base_model.model.<module>.lora_A.weight)\n"
    "  --logits   also write the soft-capped logits [B, S, V] as tensor 'logits'\n"
    "  --backend  reference (default: the ground truth) or cpu (the fast kernels, float32)\n"
    "Prints {\"ce_loss\", \"lb_loss\", \"total_loss\", ...} as one JSON object on stdout.\n";

// Reads an int32 [B, S+1] token file into a batch of B rows of S inputs and targets.
Batch read_token_rows(const std::string& path, int64_t rows, int64_t vocab) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read tokens file '", path, "'");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() % 4 != 0)
    fail("tokens file '", path, "' has ", bytes.size(), " bytes, not a whole number of int32 values");
  const int64_t n = int64_t(bytes.size() / 4);
  if (rows <= 0 || n % rows != 0 || n / rows < 2)
    fail("tokens file '", path, "' holds ", n, " int32 values, which is not --batch ", rows,
         " rows of S+1 >= 2 tokens");
  std::vector<int32_t> tok(n);
  std::memcpy(tok.data(), bytes.data(), bytes.size());
  const int64_t width = n / rows, S = width - 1;
  for (int64_t i = 0; i < n; ++i)
    if (tok[i] < 0 || tok[i] >= vocab)
      fail("tokens file '", path, "': token ", tok[i], " at row ", i / width, ", column ",
           i % width, " is outside the vocabulary [0, ", vocab, ")");
  Batch b;
  b.batch = rows;
  b.seq = S;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t s = 0; s < S; ++s) {
      b.inputs.push_back(tok[r * width + s]);
      b.targets.push_back(tok[r * width + s + 1]);
      b.positions.push_back(int32_t(s));
      b.segment_ids.push_back(1);
      b.target_segment_ids.push_back(1);
    }
  return b;
}

}  // namespace

int cmd_grad(int argc, char** argv) {
  const Flags flags("grad", argc, argv,
                    {{"model"},
                     {"adapter"},
                     {"tokens"},
                     {"batch"},
                     {"out"},
                     {"logits"},
                     {"dtype"},
                     {"load_balance_loss_weight"},
                     {"backend"}});
  if (flags.help()) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  refuse_outputs_over_inputs({{flags.get("out"), "--out"}, {flags.get("logits", ""), "--logits"}},
                             {{flags.get("model"), "--model"},
                              {flags.get("tokens"), "--tokens"},
                              {flags.get("adapter", ""), "--adapter"}});
  HfModelFolder folder = read_hf_model_folder(flags.get("model"));
  folder.config.load_balance_loss_weight =
      flags.get_double("load_balance_loss_weight", folder.config.load_balance_loss_weight);
  const DType dtype = parse_dtype(flags.get("dtype", "float32"));
  if (dtype != DType::F32 && dtype != DType::F64)
    fail("gemmax grad: --dtype must be float32 or float64, got ", flags.get("dtype"));
  const Batch batch = read_token_rows(flags.get("tokens"), flags.get_int("batch"),
                                      folder.config.vocab_size);
  const std::string out = flags.get("out");

  auto backend = make_backend(flags.get("backend", "reference"));
  Gemma4Model model(folder.config, *backend, {dtype, RematPolicy::None, 1});
  const ParamTable& table = model.params();
  Tensor host = Tensor::empty({table.total()}, dtype, MemKind::Params);
  if (const std::string note = load_hf_weights(table, folder, host); !note.empty())
    std::cerr << "gemmax: " << note << "\n";
  const Tensor weights = backend->to_device(host, MemKind::Params);
  host = Tensor();
  const StepInputs in = upload_batch(*backend, batch);
  LossInfo loss;
  Tensor logits;
  if (!flags.has("adapter")) {
    const Tensor grads = backend->zeros({table.total()}, dtype, MemKind::Grads);
    loss = model.forward_backward(in, weights, grads);
    write_safetensors(
        out, hf_named_tensors(table, backend->to_host(grads), folder.info.weight_prefix, dtype));
    if (flags.has("logits")) model.forward(in, weights, &logits);
  } else {  // the adapters' gradients, the base frozen
    const PeftAdapter a = read_peft_adapter(flags.get("adapter"), table, dtype);
    const AdapterTable adapters(table, a.targets, a.shape);
    const Tensor aw = backend->to_device(a.weights, MemKind::Params);
    const Tensor ag = backend->zeros({aw.numel()}, dtype, MemKind::Grads);
    const Tensor scalars = backend->zeros({StepScalars::kCount}, DType::F64, MemKind::Workspace);
    WholeParams frozen(*backend, table, model.options(), weights, Tensor());
    LoraParams params(*backend, frozen, adapters, model.options(), aw, ag);
    model.forward_backward(in, params, scalars);
    loss = model.losses(backend->to_host(scalars), in);
    write_safetensors(
        out, peft_named_tensors(adapters, backend->to_host(ag), folder.info.weight_prefix, dtype));
    if (flags.has("logits")) {
      LoraParams forward(*backend, frozen, adapters, model.options(), aw, Tensor());
      const Tensor x = model.forward_only(in, forward, scalars);
      const ModelWeights w = bind_model(table, weights);
      logits = head_logits(*backend, folder.config, model.options(),
                           HeadWeights{w.embed, w.final_norm}, x);
    }
  }
  if (flags.has("logits"))
    write_safetensors(flags.get("logits"),
                      {{"logits", backend->to_host(logits).view(
                                      {batch.batch, batch.seq, folder.config.vocab_size})}});
  nlohmann::json j;
  j["ce_loss"] = loss.ce_loss;
  j["lb_loss"] = loss.lb_loss;
  j["total_loss"] = loss.total_loss;
  j["num_targets"] = loss.num_targets;
  j["dtype"] = dtype_name(dtype);
  j["backend"] = backend->describe();
  j["gradients"] = out;
  std::cout << j.dump() << std::endl;
  return 0;
}

}  // namespace gemmax
