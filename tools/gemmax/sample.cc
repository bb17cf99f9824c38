// gemmax sample: text generation from a model folder, with a KV cache.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "commands.h"
#include "flags.h"
#include "gemmax/backend/backend.h"
#include "gemmax/backend/backend_factory.h"
#include "gemmax/checkpoint/model_dir.h"
#include "gemmax/io/generation_config.h"
#include "gemmax/model/generate.h"

namespace gemmax {
namespace {

const char* kUsage =
    "usage: gemmax sample --model DIR --prompt TEXT [--max_new_tokens N] [--temperature T]\n"
    "                     [--top_k K] [--top_p P] [--seed S]\n"
    "                     [--tokenizer auto|byte|sentencepiece|huggingface]\n"
    "                     [--tokenizer_path PATH]\n"
    "                     [--dtype float32|float64] [--backend cpu|reference]\n"
    "\n"
    "Continues TEXT with the model in DIR (a Hugging Face Gemma-4 folder: config.json +\n"
    "safetensors; or a gemmax run, checkpoints/ or step_N folder: its newest checkpoint),\n"
    "decoding one token at a time with a KV cache. The prompt is framed as a\n"
    "training document (bos, then its tokens); generation stops at eos or after N tokens.\n"
    "Where DIR holds a generation_config.json, its eos_token_id list is where generation\n"
    "stops and its do_sample, temperature, top_k and top_p are the defaults, as transformers'\n"
    "generate() reads them (do_sample false: greedy); the flags below override them.\n"
    "  --max_new_tokens  default 64\n"
    "  --temperature     default 1; 0 is greedy (the most likely token every time)\n"
    "  --top_k           keep the K most likely tokens; default 0 (no limit)\n"
    "  --top_p           keep the fewest most likely tokens whose probability reaches P;\n"
    "                    default 1 (no limit)\n"
    "  --seed            default 0; the same seed gives the same text\n"
    "  --tokenizer       default auto: the kind the tokenizer file holds; a named kind is\n"
    "                    checked against it\n"
    "  --tokenizer_path  a folder (its tokenizer.json, else tokenizer.model), a tokenizer.json\n"
    "                    or a SentencePiece .model file; default DIR's own tokenizer, else byte\n"
    "  --backend         default cpu\n"
    "Prints the prompt and its continuation on stdout, then the prompt and generated token\n"
    "counts and the prefill and decode speeds (tokens/s) on stderr.\n";

// --tokenizer_path, else the model folder's own tokenizer (tokenizer.json, else tokenizer.model),
// else byte; a named --tokenizer is checked against the file.
std::unique_ptr<Tokenizer> tokenizer_from(const Flags& flags, const std::string& model_dir) {
  const std::string type = flags.get("tokenizer", "auto");
  if (type != "auto" && type != "byte" && type != "sentencepiece" && type != "huggingface")
    fail("gemmax sample: --tokenizer '", type,
         "' is unknown: expected auto, byte, sentencepiece or huggingface");
  std::string path = flags.get("tokenizer_path", "");
  if (type == "byte") {
    if (!path.empty())
      fail("gemmax sample: --tokenizer_path is set but --tokenizer is byte, which needs no file");
    return make_byte_tokenizer();
  }
  if (path.empty()) {
    std::error_code ec;
    for (const char* name : {"tokenizer.json", "tokenizer.model"})
      if (std::filesystem::is_regular_file(std::filesystem::path(model_dir) / name, ec))
        path = model_dir;
    if (path.empty() && type != "auto")
      fail("gemmax sample: --tokenizer ", type,
           " needs --tokenizer_path (a tokenizer.json or .model file); the model folder has no "
           "tokenizer.json or tokenizer.model");
  }
  return make_tokenizer(type, path);
}

}  // namespace

int cmd_sample(int argc, char** argv) {
  const Flags flags("sample", argc, argv,
                    {{"model"},
                     {"prompt"},
                     {"max_new_tokens"},
                     {"temperature"},
                     {"top_k"},
                     {"top_p"},
                     {"seed"},
                     {"tokenizer"},
                     {"tokenizer_path"},
                     {"dtype"},
                     {"backend"}});
  if (flags.help()) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const std::string dir = flags.get("model");
  const std::string prompt = flags.get("prompt");
  if (prompt.empty()) fail("gemmax sample: --prompt is empty; give some text to continue");
  SampleOptions opts;
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
  if (seed < 0) fail("gemmax sample: --seed must be >= 0, got ", seed);
  opts.seed = uint64_t(seed);
  check_sample_options(opts);
  const DType dtype = parse_dtype(flags.get("dtype", "float32"));
  if (dtype != DType::F32 && dtype != DType::F64)
    fail("gemmax sample: --dtype must be float32 or float64, got ", flags.get("dtype"));

  // The tokenizer first: a wrong one fails before a large model is read.
  const auto tokenizer = tokenizer_from(flags, dir);
  const LoadedModel loaded = load_model_dir(dir, dtype);
  if (!loaded.note.empty()) std::cerr << "gemmax: " << loaded.note << "\n";
  auto backend = make_backend(flags.get("backend", "cpu"));
  const Gemma4Model model(loaded.config, *backend, {dtype, RematPolicy::None, 1});
  const Tensor weights = backend->to_device(loaded.weights, MemKind::Params);
  std::cerr << "gemmax: " << loaded.source << " | " << loaded.config.num_layers << " layers | "
            << "vocab " << loaded.config.vocab_size << " | tokenizer " << tokenizer->describe()
            << " | backend " << backend->describe() << "\n";

  const Generation g = generate(model, weights, *tokenizer, prompt, opts);
  std::cout << g.prompt_text << g.completion << std::endl;
  std::cerr << "gemmax: " << generation_stats(g) << std::endl;
  return 0;
}

}  // namespace gemmax
