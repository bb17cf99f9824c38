// gemmax chat: a conversation with a model through its own chat template.
#include "gemmax/model/chat.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "commands.h"
#include "decoding_setup.h"
#include "flags.h"
#include "gemmax/data/chat_template.h"

namespace gemmax {
namespace {

const std::string kUsage =
    std::string(
        "usage: gemmax chat --model DIR [--adapter DIR] [--prompt TEXT | --messages FILE.jsonl]\n"
        "                   [--system TEXT]\n"
        "                   [--chat_template_path FILE] [--max_new_tokens N] [--max_length N]\n"
        "                   [sampling, tokenizer and backend flags as gemmax sample]\n"
        "\n"
        "Talks to the model in DIR (a Hugging Face Gemma-4 folder, or a gemmax run: its newest\n"
        "checkpoint) through its own chat template (DIR's chat_template.jinja or\n"
        "tokenizer_config.json, or --chat_template_path), as transformers' apply_chat_template\n"
        "renders it with add_generation_prompt. Each reply is streamed to stdout as it is decoded\n"
        "and ends at the end-of-turn token (the template's, generation_config.json's eos ids or\n"
        "the tokenizer's eos) or after --max_new_tokens; the KV cache keeps the conversation, so "
        "a\n"
        "turn costs only its own tokens.\n"
        "  (no --prompt/--messages)  one user turn per line of standard input; at a terminal a\n"
        "                    '> ' prompt is shown, and /exit or end of input ends the chat\n"
        "  --prompt TEXT     one user turn, one reply\n"
        "  --messages FILE   a JSONL file: each line's conversation (\"messages\", \"tools\", ...\n"
        "                    as training data) gets one reply, printed on a line of its own\n"
        "  --system TEXT     a system turn first (not with --messages)\n"
        "  --max_new_tokens  per reply; default 512\n"
        "  --max_length      positions the KV cache holds for the whole conversation; default "
        "4096\n") +
    kDecodingFlagsUsage +
    "The prompt and reply token counts and speeds go to stderr after each reply.\n";

void stats(const ChatReply& r) {
  std::cerr << "gemmax: prompt " << r.prompt_tokens << " tokens (" << r.reused_tokens
            << " from the cache) | reply " << r.ids.size() << " tokens"
            << (r.ended_turn ? "" : " (max_new_tokens)") << " | prefill "
            << (r.prefill_seconds > 0 ? double(r.prompt_tokens - r.reused_tokens) / r.prefill_seconds : 0.0)
            << " tokens/s | decode "
            << (r.decode_seconds > 0 ? double(r.ids.size()) / r.decode_seconds : 0.0)
            << " tokens/s\n";
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  const Flags flags("chat", argc, argv,
                    decoding_flags({{"prompt"}, {"messages"}, {"system"}, {"chat_template_path"},
                                    {"max_length"}}));
  if (flags.help()) {
    std::fputs(kUsage.c_str(), stdout);
    return 0;
  }
  const std::string dir = flags.get("model");
  if (flags.has("prompt") && flags.has("messages"))
    fail("gemmax chat: give --prompt or --messages, not both");
  if (flags.has("system") && flags.has("messages"))
    fail("gemmax chat: --system is for --prompt or standard input; a --messages line has its own "
         "system turn");
  ChatOptions opts;
  opts.sample = decoding_options(flags, dir, 512);
  opts.max_length = flags.get_int("max_length", opts.max_length);
  if (opts.max_length <= opts.sample.max_new_tokens)
    fail("gemmax chat: --max_length (", opts.max_length, ") must exceed --max_new_tokens (",
         opts.sample.max_new_tokens, "): it holds the conversation and the reply");
  // The template before the model: a folder without one fails before a large model is read.
  const ChatTemplate chat(flags.has("chat_template_path")
                              ? chat_template_from_file(flags.get("chat_template_path"))
                              : chat_template_from_model_dir(dir));
  const DecodingModel m = load_decoding_model(flags, dir, "chat");
  opts.lora = m.lora();
  auto stream = [](std::string_view text) {
    std::cout << text;
    std::cout.flush();
  };

  if (flags.has("messages")) {
    const std::string path = flags.get("messages");
    std::ifstream in(path);
    if (!in) fail("gemmax chat: cannot read --messages '", path, "'");
    size_t n = 0;
    ChatSession session(*m.model, m.weights, *m.tokenizer, chat, opts);  // one decoder for all
    for (std::string line; std::getline(in, line);) {
      ++n;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::ordered_json example;
      try {
        example = parse_chat_line(line);
      } catch (const std::exception& e) {
        fail(path, ":", n, ": not a JSON conversation (", e.what(), ")");
      }
      try {
        session.start(example);
        stats(session.reply(stream));
      } catch (const Error& e) {
        fail(path, ":", n, ": ", e.what());
      }
      std::cout << std::endl;
    }
    return 0;
  }

  nlohmann::ordered_json start = {{"messages", nlohmann::ordered_json::array()}};
  if (flags.has("system"))
    start["messages"].push_back({{"role", "system"}, {"content", flags.get("system")}});
  ChatSession session(*m.model, m.weights, *m.tokenizer, chat, opts, start);
  if (flags.has("prompt")) {
    stats(session.say(flags.get("prompt"), stream));
    std::cout << std::endl;
    return 0;
  }
  const bool terminal = isatty(STDIN_FILENO);
  for (std::string line;;) {
    if (terminal) std::cerr << "> " << std::flush;
    if (!std::getline(std::cin, line)) break;
    if (terminal && line == "/exit") break;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    stats(session.say(line, stream));
    std::cout << std::endl;
  }
  return 0;
}

}  // namespace gemmax
