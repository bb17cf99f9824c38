// gemmax sample: text generation from a model folder, with a KV cache.
#include <cstdio>
#include <iostream>
#include <string>

#include "commands.h"
#include "decoding_setup.h"
#include "flags.h"
#include "gemmax/model/generate.h"

namespace gemmax {
namespace {

const std::string kUsage =
    std::string(
        "usage: gemmax sample --model DIR [--adapter DIR] --prompt TEXT [--max_new_tokens N]\n"
        "                     [--temperature T]\n"
        "                     [--top_k K] [--top_p P] [--seed S]\n"
        "                     [--tokenizer auto|byte|sentencepiece|huggingface]\n"
        "                     [--tokenizer_path PATH]\n"
        "                     [--dtype float32|float64] [--backend cpu|reference]\n"
        "\n"
        "Continues TEXT with the model in DIR (a Hugging Face Gemma-4 folder: config.json +\n"
        "safetensors; or a gemmax run, checkpoints/ or step_N folder: its newest checkpoint),\n"
        "decoding one token at a time with a KV cache. The prompt is framed as a\n"
        "training document (bos, then its tokens); generation stops at eos or after N tokens.\n"
        "(`gemmax chat` talks to the model through its chat template instead.)\n"
        "  --max_new_tokens  default 64\n") +
    kDecodingFlagsUsage +
    "Prints the prompt and its continuation on stdout, then the prompt and generated token\n"
    "counts and the prefill and decode speeds (tokens/s) on stderr.\n";

}  // namespace

int cmd_sample(int argc, char** argv) {
  const Flags flags("sample", argc, argv, decoding_flags({{"prompt"}}));
  if (flags.help()) {
    std::fputs(kUsage.c_str(), stdout);
    return 0;
  }
  const std::string dir = flags.get("model");
  const std::string prompt = flags.get("prompt");
  if (prompt.empty()) fail("gemmax sample: --prompt is empty; give some text to continue");
  const SampleOptions opts = decoding_options(flags, dir, 64);
  const DecodingModel m = load_decoding_model(flags, dir, "sample");
  const Generation g = generate(*m.model, m.weights, *m.tokenizer, prompt, opts, m.lora());
  std::cout << g.prompt_text << g.completion << std::endl;
  std::cerr << "gemmax: " << generation_stats(g) << std::endl;
  return 0;
}

}  // namespace gemmax
