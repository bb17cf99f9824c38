// tokenizer.json's BPE model, as the library's: characters (or their <0xXX> bytes, or the
// unknown token) merged pair by pair, lowest merge rank first, leftmost first among equals.
#include <nlohmann/json.hpp>
#include <queue>

#include "gemmax/base/error.h"
#include "gemmax/data/hf_tokenizer.h"

namespace gemmax::hf {
namespace {

std::string optional_string(const nlohmann::json& j, const char* key, const Where& w) {
  if (!j.contains(key) || j[key].is_null()) return "";
  return string_field(j, key, w);
}

uint64_t pair_key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }

// A character's UTF-8 bytes as one number (at most 4 bytes).
uint32_t char_key(std::string_view c) {
  uint32_t k = 0;
  for (char b : c) k = k << 8 | uint8_t(b);
  return k;
}

}  // namespace

Bpe::Bpe(const nlohmann::json& m, const Where& w) {
  if (m.contains("dropout") && !m["dropout"].is_null() &&
      !(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0))
    fail_at(w.at("dropout"), str_cat("BPE dropout ", m["dropout"].dump(),
                                     " samples merges at random; gemmax encodes deterministically: "
                                     "set it to null"));
  unk_token_ = optional_string(m, "unk_token", w);
  prefix_ = optional_string(m, "continuing_subword_prefix", w);
  suffix_ = optional_string(m, "end_of_word_suffix", w);
  fuse_unk_ = bool_field(m, "fuse_unk", false, w);
  byte_fallback_ = bool_field(m, "byte_fallback", false, w);
  ignore_merges_ = bool_field(m, "ignore_merges", false, w);

  const auto& vocab = field(m, "vocab", w);
  if (!vocab.is_object())
    fail_at(w.at("vocab"), str_cat("expected an object of token: id, got ", vocab.type_name()));
  vocab_.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      fail_at(w.at("vocab"), str_cat("token \"", token, "\" has id ", id.dump(),
                                     "; expected a non-negative integer"));
    vocab_.emplace(token, int32_t(id.get<int64_t>()));
  }
  for (int b = 0; b < 256; ++b) {
    char code[8];
    std::snprintf(code, sizeof code, "<0x%02X>", b);
    byte_ids_[b] = find(code);
  }
  if (!unk_token_.empty()) unk_id_ = find(unk_token_);

  const auto& merges = field(m, "merges", w);
  if (!merges.is_array()) fail_at(w.at("merges"), "expected a list of merges");
  merges_.reserve(merges.size());
  ascii_ids_.assign(256, -1);
  for (const auto& [token, id] : vocab_) {  // single characters, for the first step of tokenize
    if (token.size() == 1)
      ascii_ids_[uint8_t(token[0])] = id;
    else if (token.size() <= 4 && utf8_len(uint8_t(token[0])) == token.size())
      char_ids_.emplace(char_key(token), id);
  }
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& e = merges[i];
    std::string a, b;
    if (e.is_string()) {  // "a b": split at the first space
      const std::string& s = e.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos)
        fail_at(w.at("merges").index(i),
                str_cat("the merge \"", s, "\" is not two tokens \"a b\""));
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      fail_at(w.at("merges").index(i),
              str_cat("expected \"a b\" or [\"a\", \"b\"], got ", e.dump()));
    }
    if (!prefix_.empty() && b.size() < prefix_.size())
      fail_at(w.at("merges").index(i), str_cat("the merge's second token \"", b,
                                               "\" is shorter than continuing_subword_prefix"));
    const std::string merged = a + b.substr(std::min(prefix_.size(), b.size()));
    for (const std::string* t : std::initializer_list<const std::string*>{&a, &b, &merged})
      if (find(*t) < 0)
        fail_at(w.at("merges").index(i),
                str_cat("the merge \"", a, " ", b, "\" names \"", *t,
                        "\", which is not in model.vocab; the file is inconsistent: "
                        "re-export it, or add the token to the vocabulary"));
    merges_.put(pair_key(find(a), find(b)),
                {uint32_t(i), find(merged)});  // a repeat: the last wins
  }
}

void Bpe::MergeTable::reserve(size_t n) {
  size_t cap = 16;
  shift = 60;
  while (cap < 2 * n + 2) {
    cap *= 2;
    --shift;
  }
  keys.assign(cap, kEmpty);
  values.assign(cap, {});
  mask = cap - 1;
}

void Bpe::MergeTable::put(uint64_t key, Merge m) {
  for (uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> shift;; i = (i + 1) & mask) {
    if (keys[i] == kEmpty) {
      keys[i] = key;
      ++size;
    }
    if (keys[i] == key) {
      values[i] = m;
      return;
    }
  }
}

int32_t Bpe::char_id(std::string_view c) const {
  if (c.size() == 1) return ascii_ids_[uint8_t(c[0])];
  const auto it = char_ids_.find(char_key(c));
  return it == char_ids_.end() ? -1 : it->second;
}

void Bpe::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_)
    if (const int32_t id = find(word); id >= 0) return ids.push_back(id);
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  int32_t unk = -1;  // a pending unknown token (fused over consecutive unknown characters)
  std::string decorated;
  for (size_t i = 0; i < word.size();) {
    const size_t n = std::min(utf8_len(uint8_t(word[i])), word.size() - i);
    std::string_view s = word.substr(i, n);
    const bool first = i == 0, last = i + n == word.size();
    i += n;
    if ((!first && !prefix_.empty()) || (last && !suffix_.empty())) {
      decorated.clear();
      if (!first) decorated += prefix_;
      decorated += s;
      if (last) decorated += suffix_;
      s = decorated;
    }
    if (const int32_t id = s.size() == n ? char_id(s) : find(s); id >= 0) {
      if (unk >= 0) symbols.push_back(std::exchange(unk, -1));
      symbols.push_back(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : s) all = all && byte_ids_[uint8_t(c)] >= 0;
      if (all) {  // as the library: a pending unknown token stays pending past these bytes
        for (char c : s) symbols.push_back(byte_ids_[uint8_t(c)]);
        continue;
      }
    }
    if (unk_token_.empty()) continue;  // no unknown token: the character is dropped
    if (unk_id_ < 0)
      fail("tokenizer.json: model.unk_token \"", unk_token_,
           "\" is not in model.vocab, and the text has a character outside the vocabulary");
    if (unk >= 0 && !fuse_unk_) symbols.push_back(unk);
    unk = unk_id_;
  }
  if (unk >= 0) symbols.push_back(unk);
  merge_all(symbols);
  ids.insert(ids.end(), symbols.begin(), symbols.end());
}

// The library's Word::merge_all: a queue of (rank, position) over adjacent pairs; stale entries
// (a side already merged away, or the pair changed) are skipped when popped.
void Bpe::merge_all(std::vector<int32_t>& symbols) const {
  const int32_t n = int32_t(symbols.size());
  if (n < 2 || merges_.size == 0) return;
  struct Entry {
    uint32_t rank;
    int32_t pos, id;
    bool operator<(const Entry& o) const {  // the queue's top: lowest rank, then lowest position
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  thread_local std::vector<int32_t> prev, next;
  thread_local std::vector<Entry> heap;
  prev.resize(n);
  next.resize(n);
  heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  for (int32_t i = 0; i + 1 < n; ++i)
    if (const Merge* m = merge_of(symbols[i], symbols[i + 1])) heap.push_back({m->rank, i, m->id});
  std::make_heap(heap.begin(), heap.end());
  constexpr int32_t kGone = -1;
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Entry top = heap.back();
    heap.pop_back();
    const int32_t p = top.pos;
    if (symbols[p] == kGone || next[p] < 0) continue;
    const int32_t q = next[p];
    const Merge* m = merge_of(symbols[p], symbols[q]);
    if (!m || m->id != top.id) continue;
    symbols[p] = top.id;
    symbols[q] = kGone;
    next[p] = next[q];
    if (next[q] >= 0) prev[next[q]] = p;
    if (prev[p] >= 0)
      if (const Merge* l = merge_of(symbols[prev[p]], symbols[p])) {
        heap.push_back({l->rank, prev[p], l->id});
        std::push_heap(heap.begin(), heap.end());
      }
    if (next[p] >= 0)
      if (const Merge* r = merge_of(symbols[p], symbols[next[p]])) {
        heap.push_back({r->rank, p, r->id});
        std::push_heap(heap.begin(), heap.end());
      }
  }
  std::erase(symbols, kGone);
}

}  // namespace gemmax::hf
