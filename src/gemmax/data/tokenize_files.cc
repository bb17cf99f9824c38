#include "gemmax/data/tokenize_files.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

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

// One document's ids, made on any thread; written in input order by the caller.
struct Encoded {
  enum Kind { kEmpty, kText, kPair, kConversation } kind = kEmpty;
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;  // empty: every token counts
  bool bos = true;
  std::string error;  // the document's failure, raised when its turn to be written comes
};

// Calls f(i) for i in [0, n) on `threads` threads.
template <class F>
void parallel_for(size_t n, int threads, F f) {
  if (threads <= 1 || n < 2) {
    for (size_t i = 0; i < n; ++i) f(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < n;) f(i);
    });
  for (auto& t : pool) t.join();
}

class DocumentEncoder {
 public:
  DocumentEncoder(const TokenizeOptions& o, const Tokenizer& tok, const ChatTemplate* chat)
      : o_(o), tok_(tok), chat_(chat) {}

  Encoded text(std::string_view text) const {
    Encoded e;
    if (text.empty()) return e;
    e.kind = Encoded::kText;
    e.ids = tok_.encode(text);
    e.bos = o_.add_bos;
    return e;
  }

  Encoded jsonl_line(const std::string& path, size_t n, std::string_view line) const {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail(path, ":", n, ": not valid JSON (", e.what(),
           "); a .jsonl input needs one JSON object per line");
    }
    if (j.is_object() && j.contains("messages")) return conversation(path, n, std::string(line));
    if (j.is_object() && (j.contains("prompt") || j.contains("completion")))
      return pair(path, n, j);
    if (!j.is_object() || !j.contains(o_.text_key))
      fail(path, ":", n, ": expected a JSON object with a \"", o_.text_key,
           "\" field (set another field with "
           "--text_key)");
    if (!j[o_.text_key].is_string())
      fail(path, ":", n, ": field \"", o_.text_key, "\" is ", j[o_.text_key].type_name(),
           ", expected a string");
    return text(j[o_.text_key].get_ref<const std::string&>());
  }

 private:
  // TRL's prompt-completion form: one document, the prompt's tokens then the completion's, the
  // completion alone counted by the loss mask (sft_train_on_completion_only).
  Encoded pair(const std::string& path, size_t line, const nlohmann::json& j) const {
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
    Encoded e;
    e.kind = Encoded::kPair;
    e.bos = o_.add_bos;
    e.ids = tok_.encode(j["prompt"].get_ref<const std::string&>());
    const std::vector<int32_t> completion =
        tok_.encode(j["completion"].get_ref<const std::string&>());
    if (completion.empty())
      fail(path, ":", line,
           ": the completion is empty after tokenization: nothing to learn from "
           "this pair; drop it or give it a completion");
    e.mask.assign(e.ids.size(), 0);
    e.ids.insert(e.ids.end(), completion.begin(), completion.end());
    e.mask.resize(e.ids.size(), 1);
    return e;
  }

  // A conversation rendered by the chat template: one document, the assistant turns counted.
  // The template writes bos itself (or not); an eos it writes at the very end is the document's.
  Encoded conversation(const std::string& path, size_t line, const std::string& raw) const {
    if (!chat_)
      fail(path, ":", line,
           ": a \"messages\" conversation needs a chat template: give "
           "--chat_template_dir HF_DIR (its chat_template.jinja or tokenizer_config.json), "
           "--chat_template_path FILE or --chat_template TEXT");
    RenderedChat rendered;
    try {
      const Conversation c = chat_->conversation(parse_chat_line(raw));
      rendered = chat_->render(
          c, o_.chat_spans_by_prefix_renders ? SpanSearch::kPrefixRenders : SpanSearch::kOneRender);
    } catch (const Error& e) {
      fail(path, ":", line, ": ", e.what());
    }
    // An empty answer ("", blanks, null, []) is kept as transformers renders it: its counted
    // tokens are the turn's closing text.
    if (rendered.assistant_spans.empty())
      fail(path, ":", line,
           ": the conversation has no assistant turn: nothing for the loss to "
           "count; drop it or add the answer");
    Encoded e;
    e.kind = Encoded::kConversation;
    std::vector<int32_t>& ids = e.ids;
    std::vector<uint8_t>& mask = e.mask;
    size_t pos = 0;
    auto piece = [&](size_t end, uint8_t counted, size_t turn) {
      const size_t before = ids.size();
      encode_rendered(tok_, *chat_, std::string_view(rendered.text).substr(pos, end - pos), ids);
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
    e.bos = !ids.empty() && tok_.bos_id() >= 0 && ids.front() == tok_.bos_id();
    if (e.bos) {
      ids.erase(ids.begin());
      mask.erase(mask.begin());
    }
    if (!ids.empty() && ids.back() == tok_.eos_id()) {
      ids.pop_back();
      mask.pop_back();
    }
    for (size_t k = 0; k < ids.size(); ++k)
      if (ids[k] == tok_.eos_id())
        fail(path, ":", line, ": the chat template writes the eos token (\"", chat_->eos_token(),
             "\") inside the conversation, at token ", k,
             "; a token shard separates documents "
             "by eos, so a document may not contain it");
    return e;
  }

  const TokenizeOptions& o_;
  const Tokenizer& tok_;
  const ChatTemplate* chat_;
};

}  // namespace

TokenizeResult tokenize_files(const TokenizeOptions& o) {
  if (o.out.empty()) fail("tokenize: no output shard given (--out FILE.bin)");
  if (o.inputs.empty()) fail("tokenize: no input files given");
  if (o.num_threads < 0)
    fail("tokenize: --num_threads must be >= 0 (0: every core), got ", o.num_threads);
  auto tok = make_tokenizer(o.tokenizer_type, o.tokenizer_path);
  if (tok->eos_id() < 0)
    fail("tokenize: the tokenizer ", tok->describe(),
         " has no eos token, which a shard ends each document with; give the model folder (its "
         "tokenizer_config.json names eos_token)");
  const std::unique_ptr<ChatTemplate> chat = load_chat_template(o);
  const int threads = o.num_threads > 0 ? int(o.num_threads)
                                        : int(std::max(1u, std::thread::hardware_concurrency()));
  ShardWriter writer(o.out, tok->vocab_size(), tok->eos_id(), tok->bos_id(), tok->pad_id());
  TokenizeResult r;
  r.tokenizer = tok->describe();
  const DocumentEncoder encoder(o, *tok, chat.get());
  auto write = [&](Encoded& e) {
    if (!e.error.empty()) throw Error(e.error);
    switch (e.kind) {
      case Encoded::kEmpty:
        ++r.skipped_empty;
        return;
      case Encoded::kText:
        break;
      case Encoded::kPair:
        ++r.pairs;
        break;
      case Encoded::kConversation:
        ++r.conversations;
        break;
    }
    writer.add_document(e.ids, e.bos, e.mask);
  };
  // Progress in input bytes: each block of lines as it is written, a whole-file document at its
  // end.
  double total = 0, before = 0;
  for (const std::string& path : o.inputs) {
    std::error_code ec;
    const uintmax_t n = std::filesystem::file_size(path, ec);
    total += ec ? 0.0 : double(n);
  }
  Progress progress("tokenize", total, "bytes");
  constexpr size_t kBlock = 4096;  // lines encoded together, then written in order
  for (const std::string& path : o.inputs) {
    const std::string text = read_file(path);
    const bool jsonl = ends_with(path, ".jsonl");
    if (!jsonl && !o.lines) {
      Encoded e = encoder.text(text);
      write(e);
    } else {
      std::vector<std::pair<size_t, std::string_view>> lines;
      for_each_line(text, [&](size_t n, std::string_view line) {
        if (!blank(line)) lines.emplace_back(n, line);
      });
      std::vector<Encoded> done;
      for (size_t b = 0; b < lines.size(); b += kBlock) {
        const size_t m = std::min(kBlock, lines.size() - b);
        done.assign(m, Encoded{});
        parallel_for(m, threads, [&](size_t i) {
          const auto [n, line] = lines[b + i];
          try {
            done[i] = jsonl ? encoder.jsonl_line(path, n, line) : encoder.text(line);
          } catch (const std::exception& e) {
            done[i].error = e.what();
          }
        });
        for (Encoded& e : done) write(e);
        const std::string_view last = lines[b + m - 1].second;
        progress.set(before + double(last.data() + last.size() - text.data()));
      }
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
