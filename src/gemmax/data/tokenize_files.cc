#include "gemmax/data/tokenize_files.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gemmax/base/error.h"
#include "gemmax/base/progress.h"
#include "gemmax/data/chat_template.h"
#include "gemmax/data/token_shard.h"
#include "gemmax/data/tokenizer.h"

namespace gemmax {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read input '", path, "': no such file, or not readable");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("error reading input '", path, "'");
  return ss.str();
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Calls f(line_number, line) for each line, without its "\n" or "\r\n".
template <class F>
void for_each_line(const std::string& text, F f) {
  size_t begin = 0, number = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    size_t stop = end;
    if (stop > begin && text[stop - 1] == '\r') --stop;
    f(++number, std::string_view(text).substr(begin, stop - begin));
    begin = end + 1;
  }
}

bool blank(std::string_view s) { return s.find_first_not_of(" \t\r\n") == std::string_view::npos; }

std::unique_ptr<ChatTemplate> load_chat_template(const TokenizeOptions& o) {
  if (o.chat_template_max_mib <= 0 || o.chat_template_max_steps <= 0)
    fail("tokenize: --chat_template_max_mib and --chat_template_max_steps must be positive (got ",
         o.chat_template_max_mib, " and ", o.chat_template_max_steps, ")");
  jinja::Limits limits;
  limits.max_bytes = o.chat_template_max_mib << 20;
  limits.max_steps = o.chat_template_max_steps;
  limits.bytes_option = "--chat_template_max_mib";
  limits.steps_option = "--chat_template_max_steps";
  const int given =
      !o.chat_template_dir.empty() + !o.chat_template_path.empty() + !o.chat_template.empty();
  if (given > 1)
    fail(
        "tokenize: give one chat template: --chat_template_dir, --chat_template_path or "
        "--chat_template (",
        given, " given)");
  if (!o.chat_template_dir.empty())
    return std::make_unique<ChatTemplate>(chat_template_from_model_dir(o.chat_template_dir),
                                          limits);
  if (!o.chat_template_path.empty())
    return std::make_unique<ChatTemplate>(chat_template_from_file(o.chat_template_path), limits);
  if (!o.chat_template.empty())
    return std::make_unique<ChatTemplate>(ChatTemplateSource{o.chat_template, "--chat_template"},
                                          limits);
  return nullptr;
}

}  // namespace

TokenizeResult tokenize_files(const TokenizeOptions& o) {
  if (o.out.empty()) fail("tokenize: no output shard given (--out FILE.bin)");
  if (o.inputs.empty()) fail("tokenize: no input files given");
  auto tok = make_tokenizer(o.tokenizer_type, o.tokenizer_path);
  const std::unique_ptr<ChatTemplate> chat = load_chat_template(o);
  ShardWriter writer(o.out, tok->vocab_size(), tok->eos_id(), tok->bos_id(), tok->pad_id());
  TokenizeResult r;
  r.tokenizer = tok->describe();
  auto add = [&](std::string_view text) {
    if (text.empty()) {
      ++r.skipped_empty;
      return;
    }
    writer.add_document(tok->encode(text), o.add_bos);
  };
  // TRL's prompt-completion form: one document, the prompt's tokens then the completion's, the
  // completion alone counted by the loss mask (sft_train_on_completion_only).
  auto add_pair = [&](const std::string& path, size_t line, const nlohmann::json& j) {
    for (const char* key : {"prompt", "completion"}) {
      if (!j.contains(key))
        fail(path, ":", line,
             ": a prompt-completion pair needs both \"prompt\" and "
             "\"completion\"; \"",
             key, "\" is missing");
      if (!j[key].is_string())
        fail(path, ":", line, ": field \"", key, "\" is ", j[key].type_name(),
             ", expected a string");
    }
    std::vector<int32_t> ids = tok->encode(j["prompt"].get_ref<const std::string&>());
    const std::vector<int32_t> completion =
        tok->encode(j["completion"].get_ref<const std::string&>());
    if (completion.empty())
      fail(path, ":", line,
           ": the completion is empty after tokenization: nothing to learn from "
           "this pair; drop it or give it a completion");
    std::vector<uint8_t> mask(ids.size(), 0);
    ids.insert(ids.end(), completion.begin(), completion.end());
    mask.resize(ids.size(), 1);
    writer.add_document(ids, o.add_bos, mask);
    ++r.pairs;
  };
  // A conversation rendered by the chat template: one document, the assistant turns counted.
  // The template writes bos itself (or not); an eos it writes at the very end is the document's.
  auto add_conversation = [&](const std::string& path, size_t line, const std::string& raw) {
    if (!chat)
      fail(path, ":", line,
           ": a \"messages\" conversation needs a chat template: give "
           "--chat_template_dir HF_DIR (its chat_template.jinja or tokenizer_config.json), "
           "--chat_template_path FILE or --chat_template TEXT");
    RenderedChat rendered;
    try {
      const Conversation c = chat->conversation(parse_chat_line(raw));
      rendered = chat->render(
          c, o.chat_spans_by_prefix_renders ? SpanSearch::kPrefixRenders : SpanSearch::kOneRender);
    } catch (const Error& e) {
      fail(path, ":", line, ": ", e.what());
    }
    // An empty answer ("", blanks, null, []) is kept as transformers renders it: its counted
    // tokens are the turn's closing text.
    if (rendered.assistant_spans.empty())
      fail(path, ":", line,
           ": the conversation has no assistant turn: nothing for the loss to "
           "count; drop it or add the answer");
    std::vector<int32_t> ids;
    std::vector<uint8_t> mask;
    size_t pos = 0;
    auto piece = [&](size_t end, uint8_t counted, size_t turn) {
      const size_t before = ids.size();
      encode_rendered(*tok, *chat, std::string_view(rendered.text).substr(pos, end - pos), ids);
      if (counted && ids.size() == before)
        fail(path, ":", line, ": assistant turn ", turn + 1,
             " is empty after tokenization: "
             "nothing to learn from it; drop it or give it content");
      mask.resize(ids.size(), counted);
      pos = end;
    };
    for (size_t k = 0; k < rendered.assistant_spans.size(); ++k) {
      piece(rendered.assistant_spans[k].first, 0, k);
      piece(rendered.assistant_spans[k].second, 1, k);
    }
    piece(rendered.text.size(), 0, 0);
    const bool bos = !ids.empty() && tok->bos_id() >= 0 && ids.front() == tok->bos_id();
    if (bos) {
      ids.erase(ids.begin());
      mask.erase(mask.begin());
    }
    if (!ids.empty() && ids.back() == tok->eos_id()) {
      ids.pop_back();
      mask.pop_back();
    }
    for (size_t k = 0; k < ids.size(); ++k)
      if (ids[k] == tok->eos_id())
        fail(path, ":", line, ": the chat template writes the eos token (\"", chat->eos_token(),
             "\") inside the conversation, at token ", k,
             "; a token shard separates documents "
             "by eos, so a document may not contain it");
    writer.add_document(ids, bos, mask);
    ++r.conversations;
  };
  // Progress in input bytes: each line as it is done, each whole-file document at its end.
  double total = 0, before = 0;
  for (const std::string& path : o.inputs) {
    std::error_code ec;
    const uintmax_t n = std::filesystem::file_size(path, ec);
    total += ec ? 0.0 : double(n);
  }
  Progress progress("tokenize", total, "bytes");
  for (const std::string& path : o.inputs) {
    const std::string text = read_file(path);
    auto line_done = [&](std::string_view line) {
      progress.set(before + double(line.data() + line.size() - text.data()));
    };
    if (ends_with(path, ".jsonl")) {
      for_each_line(text, [&](size_t n, std::string_view line) {
        line_done(line);
        if (blank(line)) return;
        nlohmann::json j;
        try {
          j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
          fail(path, ":", n, ": not valid JSON (", e.what(),
               "); a .jsonl input needs one JSON object per line");
        }
        if (j.is_object() && j.contains("messages")) {
          add_conversation(path, n, std::string(line));
          return;
        }
        if (j.is_object() && (j.contains("prompt") || j.contains("completion"))) {
          add_pair(path, n, j);
          return;
        }
        if (!j.is_object() || !j.contains(o.text_key))
          fail(path, ":", n, ": expected a JSON object with a \"", o.text_key,
               "\" field (set another field with "
               "--text_key)");
        if (!j[o.text_key].is_string())
          fail(path, ":", n, ": field \"", o.text_key, "\" is ", j[o.text_key].type_name(),
               ", expected a string");
        add(j[o.text_key].get_ref<const std::string&>());
      });
    } else if (o.lines) {
      for_each_line(text, [&](size_t, std::string_view line) {
        line_done(line);
        if (!blank(line)) add(line);
      });
    } else {
      add(text);
    }
    before += double(text.size());
    progress.set(before);
  }
  if (writer.num_documents() == 0)
    fail("tokenize: the inputs hold no documents (", r.skipped_empty,
         " empty); nothing written to '", o.out, "'");
  writer.finish();
  progress.finish();
  r.documents = writer.num_documents();
  r.tokens = writer.num_tokens();
  return r;
}

}  // namespace gemmax
