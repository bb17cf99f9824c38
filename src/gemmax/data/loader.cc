#include "gemmax/data/loader.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "gemmax/base/error.h"
#include "gemmax/base/strings.h"
#include "gemmax/base/rng.h"
#include "gemmax/data/builtin_corpus.h"
#include "gemmax/data/first_fit.h"
#include "gemmax/data/hf_shuffle.h"
#include "gemmax/data/packing.h"
#include "gemmax/data/token_shard.h"
#include "gemmax/data/tokenize_files.h"
#include "gemmax/data/tokenizer.h"

namespace gemmax {
namespace {

namespace fs = std::filesystem;

// Reads a key of a saved data state, turning JSON errors into messages that name the key.
template <class T>
T state_value(const nlohmann::json& s, const char* key) {
  if (!s.is_object() || !s.contains(key))
    fail("data loader state: key '", key, "' is missing (state: ", s.dump(),
         "); the checkpoint's data "
         "state is from another gemmax version or corrupt");
  try {
    return s.at(key).get<T>();
  } catch (const nlohmann::json::exception& e) {
    fail("data loader state: key '", key, "' has the wrong type (", s.at(key).dump(),
         "): ", e.what());
  }
}

template <class T>
void expect_same(const nlohmann::json& s, const char* key, const T& ours, const std::string& fix) {
  const T saved = state_value<T>(s, key);
  if (saved != ours)
    fail("data loader state: ", key, " is ", nlohmann::json(saved).dump(),
         " in the saved state but ", nlohmann::json(ours).dump(), " now: ", fix);
}

// Evaluation reads its set once, in order (docs/DATA.md): first-fit and shuffling are training's.
bool first_fit(const DataOptions& o) {
  return o.packing && o.packing_type == "first_fit" && !o.eval;
}

// dataset_type=hf shuffles as MaxText's HF pipeline does (hf_shuffle.h), the others as its grain
// pipeline.
bool hf_order(const DataOptions& o) { return o.dataset_type == "hf" && o.shuffle && first_fit(o); }

std::string packing_text(const DataOptions& o) {
  std::string s = o.packing ? first_fit(o) ? "packed first-fit" : "packed in order" : "unpacked";
  if (hf_order(o))
    s += str_cat(" in MaxText's HF-pipeline order (datasets ", o.hf_datasets_version,
                 ".x's streaming shuffle: the files shuffled, each file's rows through a ",
                 kHfShuffleBuffer, "-row buffer; seed ", o.seed, ", seed ", o.seed,
                 " + e in epoch e)");
  else if (first_fit(o) && o.shuffle)
    s += str_cat(" after a shuffle in windows of ", o.shuffle_buffer, " documents (seed ", o.seed,
                 ")");
  if (o.truncate) s += ", documents truncated to a row";
  s += str_cat(", ", o.batch, " x ", o.seq, " tokens per batch");
  if (o.ranks > 1)
    s += str_cat(" (rows ", o.rank * o.batch, "..", (o.rank + 1) * o.batch - 1, " of the global ",
                 o.ranks * o.batch, ")");
  return s;
}

// Documents packed into rows; the built-in corpus and token shards.
class PackedLoader final : public DataLoader {
 public:
  // `order`: the documents' order for first-fit packing; null: grain's window shuffle.
  PackedLoader(const DataOptions& o, Documents docs, std::string what, std::string detail,
               int32_t pad_fill, int32_t pad_id, std::shared_ptr<const DocumentOrder> order = {})
      : o_(o),
        docs_(std::move(docs)),
        what_(std::move(what)),
        detail_(std::move(detail)),
        pad_fill_(pad_fill),
        pad_id_(pad_id),
        order_(std::move(order)) {
    if (docs_.size() == 0) fail(what_, " holds no documents");
    if (!order_)
      order_ = std::make_shared<WindowShuffle>(
          docs_.size(), o_.shuffle ? uint64_t(o_.shuffle_buffer) : 0, o_.seed);
    if (order_->documents() != docs_.size())
      fail(what_, " holds ", docs_.size(), " documents (split after each eos token) but ",
           order_->documents(), " rows with text: a row's tokens hold the eos id, and MaxText's "
           "HF order shuffles whole rows; remove the eos token from the text, or set "
           "enable_data_shuffling=false");
    if (o_.completion_only && !docs_.has_loss_mask())
      fail("sft_train_on_completion_only=true but ", what_,
           " carries no loss mask (token shard version 1, or the built-in corpus): make the data "
           "with `gemmax tokenize` from JSONL lines of {\"prompt\": ..., \"completion\": ...} or "
           "{\"messages\": [...]}, or set "
           "sft_train_on_completion_only=false to count every token");
    if (o_.completion_only && !counts_a_target())
      fail("sft_train_on_completion_only=true but the loss masks of ", what_,
           " mark nothing a step could count",
           o_.truncate ? " within the first max_target_length tokens of a document (what "
                         "use_truncation=true keeps)"
                       : "",
           ": every batch would count no target token, its loss of 0 no score and nothing "
           "learnt; ",
           o_.eval ? "evaluate on data with completions or assistant turns, or set "
                     "eval_interval=-1"
                   : "make the data from prompt/completion pairs or messages with `gemmax "
                     "tokenize` (it marks the completions and assistant turns)",
           ", or set sft_train_on_completion_only=false to count every token");
    const uint64_t global = uint64_t(o_.ranks * o_.batch * o_.seq);
    if (o_.eval && docs_.num_tokens() < global)
      fail("the eval set, ", what_, ", holds ", docs_.num_tokens(),
           " tokens, fewer than one eval batch of ", o_.ranks * o_.batch, " rows x ", o_.seq,
           " tokens = ", global,
           ": add eval data, or lower eval_per_device_batch_size or max_target_length");
    // One epoch must fill at least one row and the target after it; below that every row would
    // repeat the same few tokens (and, unpacked, be mostly padding).
    if (docs_.num_tokens() < uint64_t(o_.seq) + 1)
      fail(what_, " holds ", docs_.num_tokens(),
           " tokens, fewer than max_target_length + 1 = ", o_.seq + 1,
           ": it cannot fill one row of ", o_.seq, " tokens; lower max_target_length or add data");
  }

  // Whether some document's mask marks a token a row can count: not its first (nothing comes
  // before it in its segment), and under truncation within the tokens a row keeps.
  bool counts_a_target() const {
    for (uint64_t d = 0; d < docs_.size(); ++d) {
      const std::span<const uint8_t> mask = docs_.loss_mask(d);
      if (mask.empty()) return true;  // a version-1 shard's document: every token counts
      const size_t end = o_.truncate ? std::min(mask.size(), size_t(o_.seq)) : mask.size();
      for (size_t i = 1; i < end; ++i)
        if (mask[i]) return true;
    }
    return false;
  }

  Batch next() override {
    Batch b;
    b.batch = o_.batch;
    b.seq = o_.seq;
    const size_t n = size_t(o_.batch * o_.seq);
    b.inputs.resize(n);
    b.positions.resize(n);
    b.segment_ids.resize(n);
    if (o_.completion_only) b.loss_mask.resize(n);
    // The global batch's rows are packed in order; the other ranks' rows only move the cursor.
    const int64_t first = o_.rank * o_.batch;
    const bool wrap = !o_.eval;
    if (first_fit(o_)) {
      // Every rank packs the global batch's rows together and keeps its own.
      pack_first_fit(docs_, *order_, {o_.ranks * o_.batch, o_.truncate, pad_fill_}, stream_, first,
                     b);
    } else {
      for (int64_t g = 0; g < o_.ranks * o_.batch; ++g) {
        if (g >= first && g < first + o_.batch)
          pack_row(docs_, o_.packing, pad_fill_, cur_, b, g - first, wrap, o_.truncate);
        else
          skip_row(docs_, o_.packing, cur_, o_.seq, wrap, o_.truncate);
      }
    }
    make_targets(b, pad_fill_, pad_id_);
    ++batches_;
    return b;
  }

  nlohmann::json state() const override {
    if (first_fit(o_))
      return {{"type", o_.dataset_type},
              {"packing", "first_fit"},
              {"order", order_name()},
              {"seed", o_.seed},
              {"hf_datasets_version", hf_order(o_) ? o_.hf_datasets_version : 0},
              {"position", stream_.position},
              {"offset", stream_.offset},
              {"epoch", order_->epoch(stream_.position)},
              {"shuffle_buffer", shuffle_buffer()},
              {"truncate", o_.truncate},
              {"batches", batches_},
              {"num_documents", docs_.size()},
              {"num_tokens", docs_.num_tokens()}};
    return {{"type", o_.dataset_type},
            {"document", cur_.doc},
            {"offset", cur_.offset},
            {"epoch", cur_.epoch},
            {"batches", batches_},
            {"num_documents", docs_.size()},
            {"num_tokens", docs_.num_tokens()}};
  }

  void restore(const nlohmann::json& s) override {
    const std::string fix =
        "resume with the data settings (dataset_type, dataset_path, tokenizer, "
        "data_shuffle_seed) of the saved run, or start a new run";
    expect_same(s, "type", o_.dataset_type, fix);
    expect_same(s, "num_documents", docs_.size(), fix);
    expect_same(s, "num_tokens", docs_.num_tokens(), fix);
    // A state saved before first-fit existed has no "packing": it is the sequential one.
    const std::string packing = s.is_object() && s.contains("packing")
                                    ? state_value<std::string>(s, "packing")
                                    : "sequential";
    const std::string ours = first_fit(o_) ? "first_fit" : "sequential";
    if (packing != ours)
      fail("data loader state: the saved run packed its rows ", packing, " but this run packs ",
           ours, ": resume with the saved run's grain_packing_type, or start a new run");
    if (first_fit(o_)) {
      // A state saved before the HF order existed has no "order": grain's.
      const std::string order = s.contains("order") ? state_value<std::string>(s, "order") : "grain";
      if (order != order_name())
        fail("data loader state: the saved run read its documents in ",
             order == "hf" ? "MaxText's HF-pipeline order" : "grain's window-shuffle order",
             " but this run reads them in ",
             hf_order(o_) ? "MaxText's HF-pipeline order (dataset_type=hf with "
                            "enable_data_shuffling=true; before it, gemmax used grain's window "
                            "shuffle for hf too)"
                          : "grain's window-shuffle order",
             ": resume with the saved run's dataset_type and enable_data_shuffling (and the gemmax "
             "version that saved it), or start a new run");
      if (hf_order(o_)) {
        expect_same(s, "seed", o_.seed,
                    "resume with the saved run's data_shuffle_seed, or start a new run");
        expect_same(s, "hf_datasets_version", o_.hf_datasets_version,
                    "resume with the saved run's hf_datasets_version, or start a new run");
      }
      expect_same(s, "shuffle_buffer", shuffle_buffer(),
                  "resume with the saved run's enable_data_shuffling and "
                  "grain_shuffle_buffer_size, or start a new run");
      expect_same(s, "truncate", o_.truncate,
                  "resume with the saved run's use_truncation, or start a new run");
      StreamCursor c{state_value<uint64_t>(s, "position"), state_value<uint64_t>(s, "offset")};
      if (c.offset >= docs_[order_->document(c.position)].size() || (o_.truncate && c.offset > 0))
        fail("data loader state: offset ", c.offset, " at stream position ", c.position,
             " is outside its document of ", what_, ": corrupt state");
      stream_ = c;
      batches_ = state_value<uint64_t>(s, "batches");
      return;
    }
    PackCursor c{state_value<uint64_t>(s, "document"), state_value<uint64_t>(s, "offset"),
                 state_value<uint64_t>(s, "epoch")};
    if (c.doc >= docs_.size() || c.offset >= docs_[c.doc].size())
      fail("data loader state: document ", c.doc, " offset ", c.offset, " is outside ", what_, " (",
           docs_.size(), " documents): corrupt state");
    cur_ = c;
    batches_ = state_value<uint64_t>(s, "batches");
  }

  std::string describe() const override {
    return str_cat(what_, ": ", docs_.size(), " documents, ", docs_.num_tokens(), " tokens",
                   detail_, "; ", packing_text(o_),
                   o_.completion_only ? "; loss on the masked (completion) tokens only" : "");
  }
  bool exhausted() const override { return o_.eval && cur_.epoch > 0; }

 private:
  std::string order_name() const { return hf_order(o_) ? "hf" : "grain"; }
  // The shuffle's buffer in documents (0: unshuffled); the HF order's is datasets' default.
  int64_t shuffle_buffer() const {
    return !o_.shuffle ? 0 : hf_order(o_) ? int64_t(kHfShuffleBuffer) : o_.shuffle_buffer;
  }

  DataOptions o_;
  Documents docs_;
  std::string what_, detail_;
  int32_t pad_fill_, pad_id_;
  PackCursor cur_;                // sequential packing
  std::shared_ptr<const DocumentOrder> order_;  // first-fit: the documents' order
  StreamCursor stream_;           // first-fit
  uint64_t batches_ = 0;
};

// MaxText's synthetic data: one fixed batch of random ids, returned every step. Each row draws
// S + 1 ids, so that all S targets are real tokens of the one segment.
class SyntheticLoader final : public DataLoader {
 public:
  explicit SyntheticLoader(const DataOptions& o) : o_(o) {
    Rng rng(o.seed);
    const int64_t S = o.seq;
    b_.batch = o.batch;
    b_.seq = S;
    for (auto* v :
         {&b_.inputs, &b_.targets, &b_.positions, &b_.segment_ids, &b_.target_segment_ids})
      v->resize(size_t(o.batch * S));
    std::vector<int32_t> ids(size_t(S + 1));
    // The global batch's rows are drawn in order: skip the rows of lower ranks.
    for (int64_t skip = 0; skip < o.rank * o.batch * (S + 1); ++skip)
      rng.uniform_int(uint64_t(o.vocab_size));
    for (int64_t r = 0; r < o.batch; ++r) {
      for (auto& id : ids) id = int32_t(rng.uniform_int(uint64_t(o.vocab_size)));
      for (int64_t c = 0; c < S; ++c) {
        const size_t i = size_t(r * S + c);
        b_.inputs[i] = ids[c];
        b_.targets[i] = ids[c + 1];
        b_.positions[i] = int32_t(c);
        b_.segment_ids[i] = 1;
        b_.target_segment_ids[i] = 1;
      }
    }
  }

  Batch next() override {
    ++batches_;
    return b_;
  }
  bool exhausted() const override { return o_.eval && batches_ > 0; }  // one batch is all of it
  nlohmann::json state() const override {
    return {{"type", "synthetic"}, {"seed", o_.seed}, {"batches", batches_}};
  }
  void restore(const nlohmann::json& s) override {
    const std::string fix =
        "resume with the saved run's dataset_type and data_shuffle_seed, or start a new run";
    expect_same(s, "type", std::string("synthetic"), fix);
    expect_same(s, "seed", o_.seed, fix);
    batches_ = state_value<uint64_t>(s, "batches");
  }
  std::string describe() const override {
    return str_cat("synthetic data (seed ", o_.seed, "): random ids in [0, ", o_.vocab_size,
                   "), the same batch every step; ", o_.batch, " x ", o_.seq, " tokens per batch");
  }

 private:
  DataOptions o_;
  Batch b_;
  uint64_t batches_ = 0;
};

std::unique_ptr<DataLoader> builtin_loader(const DataOptions& o) {
  auto tok = make_tokenizer(o.tokenizer_type, o.tokenizer_path);
  auto tokens = std::make_shared<std::vector<uint32_t>>();
  const uint32_t eos = uint32_t(tok->eos_id());
  if (tok->eos_id() < 0)
    fail(tok->describe(), " has no eos id; the built-in corpus separates documents with eos");
  // Training reads the corpus; evaluation the documents generated after it.
  std::vector<std::string> texts = builtin_corpus(o.seed);
  if (o.eval) {
    const size_t train_docs = texts.size();
    texts = builtin_corpus(o.seed, kBuiltinCorpusBytes + kBuiltinEvalBytes);
    texts.erase(texts.begin(), texts.begin() + ptrdiff_t(train_docs));
  }
  for (const std::string& text : texts) {
    if (tok->bos_id() >= 0) tokens->push_back(uint32_t(tok->bos_id()));  // MaxText add_bos/add_eos
    for (int32_t id : tok->encode(text)) tokens->push_back(uint32_t(id));
    tokens->push_back(eos);
  }
  const std::string what =
      str_cat(o.eval ? "the built-in corpus's held-out part" : "the built-in corpus", " (seed ",
              o.seed, ")");
  check_token_ids(what + " tokenized with " + tok->describe(), *tokens, o.vocab_size,
                  tok->vocab_size());
  Documents docs;
  docs.add(*tokens, eos, tokens);
  const int32_t pad = tok->pad_id();
  return std::make_unique<PackedLoader>(o, std::move(docs), what, ", tokenizer " + tok->describe(),
                                        pad >= 0 ? pad : 0, pad);
}

// dataset_path: a shard, a folder of *.bin shards (sorted by name), or a comma-separated list.
std::vector<std::string> shard_paths(const std::string& spec, bool eval) {
  const char* key = eval ? "eval_dataset_path" : "dataset_path";
  if (spec.empty())
    fail("dataset_type shards needs ", key,
         ": a .bin shard made by `gemmax tokenize`, a folder of them, or a comma-separated list");
  std::vector<std::string> out;
  for (const std::string& entry : split_list(spec)) {
    std::error_code ec;
    if (fs::is_directory(entry, ec)) {
      std::vector<std::string> found;
      for (const auto& e : fs::directory_iterator(entry, ec))
        if (e.path().extension() == ".bin" && e.is_regular_file(ec))
          found.push_back(e.path().string());
      if (ec) fail(key, ": cannot list folder '", entry, "': ", ec.message());
      if (found.empty())
        fail(key, ": folder '", entry,
             "' holds no *.bin token shards (make them with `gemmax tokenize`)");
      std::sort(found.begin(), found.end());
      out.insert(out.end(), found.begin(), found.end());
    } else if (fs::exists(entry, ec)) {
      out.push_back(entry);
    } else {
      fail(key, ": '", entry, "' does not exist (expected a .bin token shard or a folder of them)");
    }
  }
  if (out.empty()) fail(key, " '", spec, "' names no token shards");
  return out;
}

// Token shards of one tokenizer, as the loader's documents; `what` names them in the log.
std::unique_ptr<DataLoader> shards_loader(const DataOptions& o,
                                          const std::vector<std::shared_ptr<const TokenShard>>& shards,
                                          std::string what,
                                          std::shared_ptr<const DocumentOrder> order = {}) {
  Documents docs;
  std::shared_ptr<const TokenShard> first;
  for (const auto& shard : shards) {
    const std::string& p = shard->path();
    shard->validate_tokens(o.vocab_size);
    const ShardHeader& h = shard->header();
    if (first) {
      const ShardHeader& f = first->header();
      if (h.vocab_size != f.vocab_size || h.eos_id != f.eos_id || h.bos_id != f.bos_id ||
          h.pad_id != f.pad_id)
        fail("token shards '", first->path(), "' and '", p,
             "' were written by different tokenizers (vocab ", f.vocab_size, " vs ", h.vocab_size,
             ", eos ", f.eos_id, " vs ", h.eos_id,
             "); tokenize all shards of a dataset with the same tokenizer");
    } else {
      first = shard;
    }
    docs.add(shard->tokens(), h.eos_id, shard, shard->loss_mask());
  }
  const ShardHeader& h = first->header();
  const bool has_pad = h.pad_id != kShardNoId;
  const int32_t pad_fill = has_pad ? int32_t(h.pad_id) : 0;
  if (pad_fill >= o.vocab_size)
    fail("token shard '", first->path(), "': its pad id ", pad_fill,
         " is outside the model's vocabulary (vocab_size ", o.vocab_size,
         "): the shards' tokenizer does not match the model");
  return std::make_unique<PackedLoader>(o, std::move(docs), what,
                                        str_cat(", tokenizer vocab ", h.vocab_size), pad_fill,
                                        has_pad ? pad_fill : -1, std::move(order));
}

std::unique_ptr<DataLoader> shards_loader(const DataOptions& o) {
  const std::vector<std::string> paths = shard_paths(o.dataset_path, o.eval);
  std::vector<std::shared_ptr<const TokenShard>> shards;
  for (const std::string& p : paths) shards.push_back(std::make_shared<const TokenShard>(p));
  return shards_loader(o, shards,
                       paths.size() == 1 ? str_cat("token shard '", paths[0], "'")
                                         : str_cat(paths.size(), " token shards ('", paths.front(),
                                                   "' .. '", paths.back(), "')"));
}

// The folder whose chat template a run's `messages` rows are rendered with.
std::string chat_template_folder(const DataOptions& o) {
  for (const std::string& p : {o.tokenizer_path, o.model_dir}) {
    if (p.empty()) continue;
    std::error_code ec;
    const fs::path dir = fs::is_directory(p, ec) ? fs::path(p) : fs::path(p).parent_path();
    if (fs::exists(dir / "chat_template.jinja", ec)) return dir.string();
    // A tokenizer_config.json without a template (a base model's) is no template folder.
    std::ifstream config(dir / "tokenizer_config.json");
    const std::string text((std::istreambuf_iterator<char>(config)), {});
    if (text.find("\"chat_template\"") != std::string::npos) return dir.string();
  }
  return "";
}

// A Hugging Face dataset, tokenized as `gemmax tokenize` does it into a shard that is mapped and
// unlinked at once: the run reads the very tokens the command would write.
std::unique_ptr<DataLoader> hf_loader(const DataOptions& o) {
  static std::atomic<int> counter{0};
  TokenizeOptions t;
  t.hf_path = o.hf_path;
  t.hf_data_dir = o.hf_data_dir;
  t.hf_files = o.hf_files;
  t.split = o.hf_split;
  t.tokenizer_type = o.tokenizer_type;
  t.tokenizer_path = o.tokenizer_path;
  t.data_columns = split_list(o.data_columns);
  t.chat_template_path = o.chat_template_path;
  t.chat_template = o.chat_template;
  if (t.chat_template_path.empty() && t.chat_template.empty())
    t.chat_template_dir = chat_template_folder(o);
  t.out = (fs::temp_directory_path() /
           str_cat("gemmax-hf-", ::getpid(), "-", counter++, o.eval ? "-eval" : "", ".bin"))
              .string();
  const TokenizeResult r = tokenize_files(t);
  auto shard = std::make_shared<const TokenShard>(t.out);
  std::error_code ec;
  fs::remove(t.out, ec);  // the mapping stays
  const std::string source =
      o.hf_files.empty() ? str_cat("split ", o.hf_split, " of '", o.hf_path,
                                   o.hf_data_dir.empty() ? "" : "/" + o.hf_data_dir, "'")
                         : str_cat("files ", o.hf_files);
  try {  // the ids against the model, named by the dataset rather than the unlinked shard
    shard->validate_tokens(o.vocab_size);
  } catch (const Error& e) {
    fail("the Hugging Face dataset's ", source, ", tokenized with ", r.tokenizer, ": ", e.what());
  }
  // The shard holds the documents in file order; MaxText's HF order is over the dataset's rows.
  std::shared_ptr<const DocumentOrder> order;
  if (hf_order(o))
    order = std::make_shared<HfShuffleOrder>(r.file_rows, r.row_document, o.seed,
                                             o.hf_datasets_version);
  return shards_loader(o, {shard},
                       str_cat("Hugging Face dataset, ", source, " (", r.pairs, " pairs, ",
                               r.conversations, " conversations, tokenizer ", r.tokenizer, ")"),
                       std::move(order));
}

}  // namespace

std::unique_ptr<DataLoader> make_data_loader(const DataOptions& o) {
  if (o.seq <= 0) fail("max_target_length must be positive, got ", o.seq);
  if (o.batch <= 0)
    fail("per_device_batch_size must give at least one row per batch, got ", o.batch);
  if (o.vocab_size <= 0) fail("vocab_size must be positive, got ", o.vocab_size);
  GEMMAX_CHECK(o.ranks >= 1 && o.rank >= 0 && o.rank < o.ranks, "data rank ", o.rank, " of ",
               o.ranks);
  if (o.dataset_type != "shards" && !o.dataset_path.empty())
    fail("dataset_path '", o.dataset_path, "' is set but dataset_type is '", o.dataset_type,
         "', which reads no files; set dataset_type=shards to train on it, or clear dataset_path");
  if (o.dataset_type != "hf" && (!o.hf_path.empty() || !o.hf_files.empty()))
    fail(o.hf_path.empty() ? "hf_train_files '" + o.hf_files : "hf_path '" + o.hf_path,
         "' is set but dataset_type is '", o.dataset_type,
         "', which reads no Hugging Face dataset; set dataset_type=hf to train on it, or clear it");
  if (o.completion_only && o.dataset_type != "shards" && o.dataset_type != "hf")
    fail("sft_train_on_completion_only=true needs dataset_type=shards (token shards whose loss "
         "mask `gemmax tokenize` wrote) or hf (prompt/completion or messages columns), but "
         "dataset_type is '", o.dataset_type, "'");
  if (o.packing_type != "sequential" && o.packing_type != "first_fit")
    fail("grain_packing_type '", o.packing_type,
         "' is not one gemmax packs: expected first_fit (MaxText's grain default, and gemmax's) or "
         "sequential (documents in order)",
         o.packing_type == "best_fit" || o.packing_type == "concat_then_split"
             ? " (MaxText's best_fit and concat_then_split are not implemented)"
             : "");
  if (o.dataset_type == "hf" && o.hf_datasets_version != 4 && o.hf_datasets_version != 5)
    fail("hf_datasets_version=", o.hf_datasets_version,
         ": gemmax follows the streaming shuffle of Hugging Face datasets 4.x or 5.x; set 4 or 5");
  if (o.shuffle && o.shuffle_buffer < 1)
    fail("grain_shuffle_buffer_size=", o.shuffle_buffer,
         " with enable_data_shuffling=true: the shuffle window needs at least 1 document");
  if (o.shuffle && !first_fit(o) && !o.eval && o.dataset_type != "synthetic")
    fail("enable_data_shuffling=true shuffles the documents for first-fit packing only (MaxText's "
         "grain pipeline), but packing=", o.packing ? "true" : "false", " and grain_packing_type=",
         o.packing_type, " read them in order: set packing=true and grain_packing_type=first_fit, "
         "or enable_data_shuffling=false");
  if (o.dataset_type == "builtin") return builtin_loader(o);
  if (o.dataset_type == "shards") return shards_loader(o);
  if (o.dataset_type == "hf") return hf_loader(o);
  if (o.dataset_type == "synthetic") return std::make_unique<SyntheticLoader>(o);
  fail("dataset_type '", o.dataset_type, "' is unknown: expected builtin, shards, hf or synthetic");
}

}  // namespace gemmax
