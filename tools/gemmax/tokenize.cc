// gemmax tokenize: text files -> one token shard for dataset_type=shards.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "commands.h"
#include "flags.h"
#include "gemmax/base/error.h"
#include "gemmax/base/strings.h"
#include "gemmax/data/hf_dataset.h"
#include "gemmax/data/tokenize_files.h"
#include "gemmax/data/tokenizer.h"
#include "gemmax/io/no_clobber.h"

namespace gemmax {
namespace {

const char* kUsage =
    "usage: gemmax tokenize --out FILE.bin [options] INPUT...\n"
    "\n"
    "Tokenizes text into a token shard (format: docs/DATA.md) for dataset_type=shards.\n"
    "Each document is written as [bos] tokens eos.\n"
    "\n"
    "Inputs:\n"
    "  *.jsonl          one JSON object per line; its \"text\" field is a document, or\n"
    "                   {\"prompt\": P, \"completion\": C} is one document P C whose loss mask\n"
    "                   counts C only (train with sft_train_on_completion_only=true), or\n"
    "                   {\"messages\": [{\"role\": R, \"content\": C}, ...]} is one conversation\n"
    "                   rendered with the chat template, whose mask counts the assistant turns\n"
    "  *.parquet, *.arrow, *.json\n"
    "                   rows of a Hugging Face dataset (--data_columns; Parquet and Arrow\n"
    "                   need a build with Apache Arrow, cmake -DGEMMAX_ARROW=ON)\n"
    "  --hf_path DIR    a Hugging Face dataset folder instead of files: a hub download\n"
    "                   (data/*.parquet, ...) or datasets.save_to_disk's folder (docs/DATA.md)\n"
    "  any other file   plain UTF-8 text: the whole file is one document (see --lines)\n"
    "Empty documents are skipped.\n"
    "\n"
    "Options:\n"
    "  --out FILE.bin             the shard to write (written to a temporary name, then renamed)\n"
    "  --tokenizer_path PATH      a model folder (its tokenizer.json, else tokenizer.model), a\n"
    "                             Hugging Face tokenizer.json or a SentencePiece .model file;\n"
    "                             special ids from the files (tokenizer_config.json beside a\n"
    "                             tokenizer.json). Default: byte (vocab 259: pad 0, eos 1, bos 2,\n"
    "                             byte b -> b+3)\n"
    "  --tokenizer auto|byte|sentencepiece|huggingface\n"
    "                             default auto: the kind the file holds; a named kind is checked\n"
    "                             against it\n"
    "  --no-bos                   do not prepend bos to each document\n"
    "  --lines                    plain text: one document per non-empty line\n"
    "  --text_key KEY             *.jsonl: the field holding the text (default \"text\")\n"
    "  --data_columns A[,B]       dataset rows: one text column (default: --text_key), messages,\n"
    "                             or prompt,completion (MaxText's train_data_columns)\n"
    "  --hf_data_dir DIR          --hf_path: a folder inside it (MaxText's hf_data_dir)\n"
    "  --hf_files GLOBS           --hf_path: these files (comma-separated globs), not a split's\n"
    "  --split NAME               --hf_path: the split to read (default train)\n"
    "  --chat_template_dir DIR    the chat template of an HF model folder: chat_template.jinja,\n"
    "                             else tokenizer_config.json's \"chat_template\" (and its\n"
    "                             bos_token/eos_token text)\n"
    "  --chat_template_path FILE  a Jinja chat template file (MaxText's chat_template_path)\n"
    "  --chat_template TEXT       the template itself (MaxText's chat_template)\n"
    "  --chat_template_max_mib N  the strings and lists one render may make, as a running\n"
    "                             total (default 512; a template is untrusted input)\n"
    "  --chat_template_max_steps N\n"
    "                             the steps one render may take: statements and expressions\n"
    "                             evaluated, elements made, 64 bytes of text copied or scanned\n"
    "                             (default 20000000)\n"
    "  --chat_spans_by_prefix_renders\n"
    "                             find the assistant turns by rendering each turn's prompt and\n"
    "                             turn alone (2 renders a turn), not in the one full render\n"
    "  --num_threads N            lines encoded on N threads (default 0: every core); the shard\n"
    "                             is the same for every N\n"
    "  --help                     this text\n"
    "\n"
    "Example:\n"
    "  gemmax tokenize --out data/train.bin --tokenizer_path gemma-4-31B-it/ corpus.jsonl\n"
    "  gemmax train dataset_type=shards dataset_path=data/train.bin "
    "tokenizer_path=gemma-4-31B-it/\n";

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  const Flags flags("tokenize", argc, argv,
                    {{"out"},
                     {"tokenizer"},
                     {"tokenizer_type"},
                     {"tokenizer_path"},
                     {"text_key"},
                     {"no-bos", false},
                     {"lines", false},
                     {"chat_template_dir"},
                     {"chat_template_path"},
                     {"chat_template"},
                     {"chat_template_max_mib"},
                     {"chat_template_max_steps"},
                     {"chat_spans_by_prefix_renders", false},
                     {"num_threads"},
                     {"data_columns"},
                     {"hf_path"},
                     {"hf_data_dir"},
                     {"hf_files"},
                     {"split"}},
                    /*allow_positional=*/true);
  if (flags.help()) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  TokenizeOptions o;
  o.inputs = flags.positional();
  o.out = flags.get("out");
  o.tokenizer_type = flags.get("tokenizer", flags.get("tokenizer_type", "auto"));
  o.tokenizer_path = flags.get("tokenizer_path", "");
  o.text_key = flags.get("text_key", "text");
  o.add_bos = !flags.has("no-bos");
  o.lines = flags.has("lines");
  o.chat_template_dir = flags.get("chat_template_dir", "");
  o.chat_template_path = flags.get("chat_template_path", "");
  o.chat_template = flags.get("chat_template", "");
  o.chat_template_max_mib = flags.get_int("chat_template_max_mib", o.chat_template_max_mib);
  o.chat_template_max_steps = flags.get_int("chat_template_max_steps", o.chat_template_max_steps);
  o.chat_spans_by_prefix_renders = flags.has("chat_spans_by_prefix_renders");
  o.num_threads = flags.get_int("num_threads", 0);
  o.hf_path = flags.get("hf_path", "");
  o.hf_data_dir = flags.get("hf_data_dir", "");
  o.hf_files = flags.get("hf_files", "");
  o.split = flags.get("split", "train");
  o.data_columns = split_list(flags.get("data_columns", ""));
  if (o.inputs.empty() && o.hf_path.empty() && o.hf_files.empty())
    fail("gemmax tokenize: give at least one input file, or --hf_path (see gemmax tokenize "
         "--help)");
  std::vector<PathRole> inputs = {{tokenizer_file(o.tokenizer_path), "--tokenizer_path"},
                                  {o.chat_template_path, "--chat_template_path"}};
  for (const std::string& in : o.inputs) inputs.push_back({in, "input"});
  if (!o.hf_path.empty()) inputs.push_back({o.hf_path, "--hf_path"});
  // A dataset's files: --hf_files may name them outside any --hf_path folder, and a folder's
  // may be links to elsewhere (a hub download's blobs).
  if (!o.hf_path.empty() || !o.hf_files.empty())
    for (const std::string& f : hf_split_files({o.hf_path, o.hf_data_dir, o.hf_files, o.split}))
      inputs.push_back({f, o.hf_files.empty() ? "--hf_path's file" : "--hf_files"});
  // A tokenizer.json's special tokens are read from the files beside it.
  if (const std::string t = tokenizer_file(o.tokenizer_path); t.ends_with(".json"))
    for (const char* f : {"tokenizer_config.json", "special_tokens_map.json"})
      inputs.push_back({(std::filesystem::path(t).parent_path() / f).string(),
                        str_cat("--tokenizer_path's ", f)});
  // The files a template folder is read from are inputs too.
  if (!o.chat_template_dir.empty())
    for (const char* f : {"chat_template.jinja", "tokenizer_config.json"})
      inputs.push_back({o.chat_template_dir + "/" + f, str_cat("--chat_template_dir's ", f)});
  refuse_outputs_over_inputs({{o.out, "--out"}}, inputs);
  const TokenizeResult r = tokenize_files(o);
  std::printf("wrote %s: %llu document%s, %llu tokens, tokenizer %s\n", o.out.c_str(),
              (unsigned long long)r.documents, r.documents == 1 ? "" : "s",
              (unsigned long long)r.tokens, r.tokenizer.c_str());
  if (r.pairs)
    std::printf("%llu prompt-completion pairs: loss mask on the completions (shard version 2)\n",
                (unsigned long long)r.pairs);
  if (r.conversations)
    std::printf("%llu conversations: loss mask on the assistant turns (shard version 2)\n",
                (unsigned long long)r.conversations);
  if (r.skipped_empty)
    std::printf("skipped %llu empty documents\n", (unsigned long long)r.skipped_empty);
  return 0;
}

}  // namespace gemmax
