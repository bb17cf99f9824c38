#include "gemmax/data/tokenize_files.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "gemmax/base/error.h"
#include "gemmax/base/progress.h"
#include "gemmax/data/chat_template.h"
#include "gemmax/data/hf_dataset.h"
#include "gemmax/data/record_encoder.h"
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

std::string names(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// The columns rows are read with, and the field a text record keeps its text in.
std::vector<std::string> row_columns(const TokenizeOptions& o) {
  if (o.data_columns.empty()) return {o.text_key};
  std::vector<std::string> c = o.data_columns;
  std::sort(c.begin(), c.end());
  const bool pair = c == std::vector<std::string>{"completion", "prompt"};
  if (o.data_columns.size() > 1 && !pair)
    fail("data columns [", names(o.data_columns),
         "]: a row is one text column, [\"messages\"] (a conversation), or [\"prompt\", "
         "\"completion\"] (a pair); set train_data_columns / eval_data_columns (gemmax "
         "tokenize: --data_columns) to one of those");
  return o.data_columns;
}

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

}  // namespace

TokenizeResult tokenize_files(const TokenizeOptions& o) {
  if (o.out.empty()) fail("tokenize: no output shard given (--out FILE.bin)");
  if (o.inputs.empty() && o.hf_path.empty() && o.hf_files.empty())
    fail("tokenize: no input files given");
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
  const std::vector<std::string> columns = row_columns(o);
  const bool single_text = columns.size() == 1 && columns[0] != "messages";
  const RecordEncoder encoder(*tok, chat.get(), single_text ? columns[0] : o.text_key, o.add_bos,
                              o.chat_spans_by_prefix_renders);
  const bool hf = !o.hf_path.empty() || !o.hf_files.empty();
  auto add = [&](const EncodedDocument& d) {
    if (hf)
      r.row_document.push_back(d.kind == EncodedDocument::Kind::Empty
                                   ? -1
                                   : int64_t(writer.num_documents()));
    switch (d.kind) {
      case EncodedDocument::Kind::Empty: ++r.skipped_empty; return;
      case EncodedDocument::Kind::Pair: ++r.pairs; break;
      case EncodedDocument::Kind::Conversation: ++r.conversations; break;
      case EncodedDocument::Kind::Text: break;
    }
    writer.add_document(d.ids, d.add_bos, d.mask);
  };
  // Records are encoded a block at a time on `threads` threads and written in input order: the
  // shard is the same on any number of threads, and a failure is the first in input order.
  struct Pending {
    nlohmann::ordered_json record;
    std::string where;
    std::string_view text;  // a plain-text document (record unused)
    bool is_text = false;
  };
  constexpr size_t kBlock = 4096;
  std::vector<Pending> block;
  std::vector<EncodedDocument> done;
  std::vector<std::string> errors;
  auto flush = [&] {
    done.assign(block.size(), EncodedDocument{});
    errors.assign(block.size(), std::string());
    parallel_for(block.size(), threads, [&](size_t i) {
      try {
        done[i] = block[i].is_text ? encoder.encode_text(block[i].text)
                                   : encoder.encode(block[i].record, block[i].where);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
    for (size_t i = 0; i < block.size(); ++i) {
      if (!errors[i].empty()) throw Error(errors[i]);
      add(done[i]);
    }
    block.clear();
  };
  auto queue = [&](Pending p) {
    block.push_back(std::move(p));
    if (block.size() == kBlock) flush();
  };
  std::vector<std::string> inputs = o.inputs;
  if (hf && !inputs.empty())
    fail("tokenize: give input files or a dataset (hf_path / hf_train_files), not both");
  if (hf) inputs = hf_split_files({o.hf_path, o.hf_data_dir, o.hf_files, o.split});
  // Progress in input bytes: each line of a JSON Lines or plain text file, each other file at
  // its end.
  double total = 0, before = 0;
  for (const std::string& path : inputs) {
    std::error_code ec;
    const uintmax_t n = std::filesystem::file_size(path, ec);
    total += ec ? 0.0 : double(n);
  }
  Progress progress("tokenize", total, "bytes");
  for (const std::string& path : inputs) {
    std::error_code ec;
    const uintmax_t bytes = std::filesystem::file_size(path, ec);
    const bool jsonl = ends_with(path, ".jsonl");
    if (hf || jsonl || is_arrow_data_file(path) || ends_with(path, ".json")) {
      // A JSONL line given as an input file is read whole (its keys say what it is), unless
      // data columns are named; a dataset's rows are their columns.
      const std::vector<std::string> cols =
          !hf && jsonl && o.data_columns.empty() ? std::vector<std::string>() : columns;
      if (hf) r.file_rows.push_back(0);
      for_each_hf_row(
          path, cols,
          [&](const nlohmann::ordered_json& record, const std::string& where) {
            if (hf) ++r.file_rows.back();
            queue({record, where, {}, false});
          },
          [&](uint64_t read) { progress.set(before + double(read)); });
    } else {
      const std::string text = read_file(path);
      if (o.lines) {
        for_each_line(text, [&](size_t, std::string_view line) {
          progress.set(before + double(line.data() + line.size() - text.data()));
          if (!blank(line)) queue({{}, {}, line, true});
        });
      } else {
        queue({{}, {}, text, true});
      }
      flush();  // the lines point into `text`
    }
    flush();
    before += ec ? 0.0 : double(bytes);
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
