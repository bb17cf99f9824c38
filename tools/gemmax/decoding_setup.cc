#include "decoding_setup.h"

#include <filesystem>
#include <iostream>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/io/generation_config.h"

namespace gemmax {

std::vector<FlagSpec> decoding_flags(std::vector<FlagSpec> own) {
  for (const char* name : {"model", "adapter", "max_new_tokens", "temperature", "top_k", "top_p",
                           "seed", "tokenizer", "tokenizer_path", "dtype", "backend"})
    own.push_back({name});
  return own;
}

const char* const kDecodingFlagsUsage =
    "Where DIR holds a generation_config.json, its eos_token_id list is where generation\n"
    "stops and its do_sample, temperature, top_k and top_p are the defaults, as transformers'\n"
    "generate() reads them (do_sample false: greedy); the flags below override them.\n"
    "  --temperature     default 1; 0 is greedy (the most likely token every time)\n"
    "  --top_k           keep the K most likely tokens; default 0 (no limit)\n"
    "  --top_p           keep the fewest most likely tokens whose probability reaches P;\n"
    "                    default 1 (no limit)\n"
    "  --seed            default 0; the same seed gives the same text\n"
    "  --tokenizer       default auto: the kind the tokenizer file holds; a named kind is\n"
    "                    checked against it\n"
    "  --tokenizer_path  a folder (its tokenizer.json, else tokenizer.model), a tokenizer.json\n"
    "                    or a SentencePiece .model file; default DIR's own tokenizer, else byte\n"
    "  --adapter         a PEFT LoRA adapter folder (adapter_config.json +\n"
    "                    adapter_model.safetensors) applied to the model; a LoRA run's own\n"
    "                    checkpoint carries its adapters already\n"
    "  --dtype           float32 (default) or float64\n"
    "  --backend         default cpu\n";

// --tokenizer_path, else the model folder's own tokenizer (tokenizer.json, else
// tokenizer.model), else byte; a named --tokenizer is checked against the file.
std::unique_ptr<Tokenizer> decoding_tokenizer(const Flags& flags, const std::string& dir,
                                              const std::string& command) {
  const std::string type = flags.get("tokenizer", "auto");
  if (type != "auto" && type != "byte" && type != "sentencepiece" && type != "huggingface")
    fail("gemmax ", command, ": --tokenizer '", type,
         "' is unknown: expected auto, byte, sentencepiece or huggingface");
  std::string path = flags.get("tokenizer_path", "");
  if (type == "byte") {
    if (!path.empty())
      fail("gemmax ", command,
           ": --tokenizer_path is set but --tokenizer is byte, which needs no file");
    return make_byte_tokenizer();
  }
  if (path.empty()) {
    std::error_code ec;
    for (const char* name : {"tokenizer.json", "tokenizer.model"})
      if (std::filesystem::is_regular_file(std::filesystem::path(dir) / name, ec)) path = dir;
    if (path.empty() && type != "auto")
      fail("gemmax ", command, ": --tokenizer ", type,
           " needs --tokenizer_path (a tokenizer.json or .model file); the model folder has no "
           "tokenizer.json or tokenizer.model");
  }
  return make_tokenizer(type, path);
}

SampleOptions decoding_options(const Flags& flags, const std::string& dir,
                               int64_t default_max_new_tokens) {
  SampleOptions opts;
  opts.max_new_tokens = default_max_new_tokens;
  // generation_config.json's defaults first (a run folder has none), the flags over them.
  if (const auto gen = read_generation_config(dir)) {
    opts.stop_ids = gen->eos_ids;
    opts.temperature = gen->do_sample ? gen->temperature : 0.0;
    opts.top_k = gen->do_sample ? gen->top_k : 0;
    opts.top_p = gen->do_sample ? gen->top_p : 1.0;
    std::string ids;
    for (int32_t id : opts.stop_ids) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
    std::cerr << "gemmax: generation_config.json: "
              << (gen->do_sample ? str_cat("sampling at temperature ", opts.temperature, ", top_k ",
                                           opts.top_k, ", top_p ", opts.top_p)
                                 : std::string("greedy (do_sample false)"))
              << (ids.empty() ? "" : ", stops at ids " + ids) << "\n";
  }
  opts.max_new_tokens = flags.get_int("max_new_tokens", opts.max_new_tokens);
  opts.temperature = flags.get_double("temperature", opts.temperature);
  opts.top_k = flags.get_int("top_k", opts.top_k);
  opts.top_p = flags.get_double("top_p", opts.top_p);
  const int64_t seed = flags.get_int("seed", 0);
  if (seed < 0) fail("--seed must be >= 0, got ", seed);
  opts.seed = uint64_t(seed);
  check_sample_options(opts);
  return opts;
}

DecodingModel load_decoding_model(const Flags& flags, const std::string& dir,
                                  const std::string& command) {
  const DType dtype = parse_dtype(flags.get("dtype", "float32"));
  if (dtype != DType::F32 && dtype != DType::F64)
    fail("gemmax ", command, ": --dtype must be float32 or float64, got ", flags.get("dtype"));
  DecodingModel m;
  m.tokenizer = decoding_tokenizer(flags, dir, command);
  m.loaded = load_model_dir(dir, dtype);
  if (flags.has("adapter")) attach_peft_adapter(m.loaded, flags.get("adapter"));
  if (!m.loaded.note.empty()) std::cerr << "gemmax: " << m.loaded.note << "\n";
  m.backend = make_backend(flags.get("backend", "cpu"));
  m.model = std::make_unique<Gemma4Model>(m.loaded.config, *m.backend,
                                          ModelOptions{dtype, RematPolicy::None, 1});
  m.weights = m.backend->to_device(m.loaded.weights, MemKind::Params);
  if (const auto& lora = m.loaded.lora) {
    m.adapters = std::make_unique<AdapterTable>(m.model->params(), lora->targets, lora->shape);
    m.adapter_weights = m.backend->to_device(lora->weights, MemKind::Params);
    std::cerr << "gemmax: LoRA adapters from " << lora->source << " (rank " << lora->shape.rank
              << " on " << lora->targets.size() << " matrices)\n";
  }
  std::cerr << "gemmax: " << m.loaded.source << " | " << m.loaded.config.num_layers
            << " layers | vocab " << m.loaded.config.vocab_size << " | tokenizer "
            << m.tokenizer->describe() << " | backend " << m.backend->describe() << "\n";
  return m;
}

}  // namespace gemmax
