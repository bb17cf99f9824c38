// tokenizer.json pre-tokenizers: Split (every behavior, inverted or not), Metaspace, Sequence.
#include <nlohmann/json.hpp>

#include "gemmax/base/error.h"
#include "gemmax/data/hf_tokenizer.h"

namespace gemmax::hf {
namespace {

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior parse_behavior(const nlohmann::json& j, const Where& w) {
  const std::string b = string_field(j, "behavior", w);
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  fail_at(w.at("behavior"), str_cat("unknown behavior \"", b,
                                    "\": expected Removed, Isolated, MergedWithPrevious, "
                                    "MergedWithNext or Contiguous"));
}

struct Span {
  size_t begin, end;
  bool flag;  // a match (before the behavior), or to be removed (after)
};

// The library's NormalizedString::split: the text cut into matches and the gaps between them,
// then grouped by the behavior; empty pieces are dropped.
void split_by(Piece&& piece, const std::vector<std::pair<size_t, size_t>>& matches, bool invert,
              Behavior behavior, std::vector<Piece>& out) {
  const std::string& t = piece.text;
  std::vector<Span> spans;
  if (t.empty()) {
    spans.push_back({0, 0, false});
  } else {
    size_t prev = 0;
    for (auto [s, e] : matches) {
      if (prev != s) spans.push_back({prev, s, false});
      spans.push_back({s, e, true});
      prev = e;
    }
    if (prev != t.size()) spans.push_back({prev, t.size(), false});
  }
  if (invert)
    for (Span& s : spans) s.flag = !s.flag;
  std::vector<Span> groups;
  bool previous = false;
  switch (behavior) {
    case Behavior::Removed:
      groups = std::move(spans);
      break;
    case Behavior::Isolated:
      for (Span& s : spans) groups.push_back({s.begin, s.end, false});
      break;
    case Behavior::Contiguous:
      for (const Span& s : spans) {
        if (s.flag == previous && !groups.empty())
          groups.back().end = s.end;
        else
          groups.push_back({s.begin, s.end, false});
        previous = s.flag;
      }
      break;
    case Behavior::MergedWithPrevious:
      for (const Span& s : spans) {
        if (s.flag && !previous && !groups.empty())
          groups.back().end = s.end;
        else
          groups.push_back({s.begin, s.end, false});
        previous = s.flag;
      }
      break;
    case Behavior::MergedWithNext:
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.flag && !previous && !groups.empty())
          groups.back().begin = s.begin;
        else
          groups.push_back({s.begin, s.end, false});
        previous = s.flag;
      }
      std::reverse(groups.begin(), groups.end());
      break;
  }
  for (const Span& g : groups) {
    if (g.flag || g.begin == g.end) continue;
    out.push_back({t.substr(g.begin, g.end - g.begin), -1, piece.at_origin && g.begin == 0});
  }
}

class Split final : public PreTokenizer {
 public:
  Split(const nlohmann::json& j, const Where& w)
      : pattern_(Pattern::parse(field(j, "pattern", w), w.at("pattern"))),
        behavior_(parse_behavior(j, w)),
        invert_(bool_field(j, "invert", false, w)) {}
  void split(Piece&& piece, std::vector<Piece>& out) const override {
    thread_local std::vector<std::pair<size_t, size_t>> matches;
    matches.clear();
    pattern_.find(piece.text, matches);
    split_by(std::move(piece), matches, invert_, behavior_, out);
  }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

enum class Prepend { Always, First, Never };

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(const nlohmann::json& j, const Where& w) {
    replacement_ = string_field(j, "replacement", w);
    if (replacement_.empty() || utf8_len(uint8_t(replacement_[0])) != replacement_.size())
      fail_at(w.at("replacement"), str_cat("expected one character, got \"", replacement_, "\""));
    split_ = bool_field(j, "split", true, w);
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
      const std::string s = string_field(j, "prepend_scheme", w);
      if (s == "always")
        prepend_ = Prepend::Always;
      else if (s == "first")
        prepend_ = Prepend::First;
      else if (s == "never")
        prepend_ = Prepend::Never;
      else
        fail_at(w.at("prepend_scheme"),
                str_cat("expected always, first or never, got \"", s, "\""));
    } else {  // tokenizer.json files from before prepend_scheme
      prepend_ = bool_field(j, "add_prefix_space", true, w) ? Prepend::Always : Prepend::Never;
    }
  }
  void split(Piece&& piece, std::vector<Piece>& out) const override {
    std::string t;
    t.reserve(piece.text.size() + replacement_.size());
    for (char c : piece.text) {
      if (c == ' ')
        t += replacement_;
      else
        t += c;
    }
    const bool starts = t.compare(0, replacement_.size(), replacement_) == 0;
    if (!starts && (prepend_ == Prepend::Always || (prepend_ == Prepend::First && piece.at_origin)))
      t.insert(0, replacement_);
    piece.text = std::move(t);
    if (!split_) {
      if (!piece.text.empty()) out.push_back(std::move(piece));
      return;
    }
    std::vector<std::pair<size_t, size_t>> matches;
    for (size_t at = piece.text.find(replacement_); at != std::string::npos;
         at = piece.text.find(replacement_, at + replacement_.size()))
      matches.emplace_back(at, at + replacement_.size());
    split_by(std::move(piece), matches, false, Behavior::MergedWithNext, out);
  }

 private:
  std::string replacement_;
  Prepend prepend_ = Prepend::Always;
  bool split_ = true;
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void split(Piece&& piece, std::vector<Piece>& out) const override {
    std::vector<Piece> now, next;
    now.push_back(std::move(piece));
    for (const auto& p : parts_) {
      next.clear();
      for (Piece& q : now) p->split(std::move(q), next);
      std::swap(now, next);
    }
    for (Piece& q : now) out.push_back(std::move(q));
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

}  // namespace

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const nlohmann::json& j, const Where& w) {
  if (j.is_null()) return nullptr;
  const std::string type = string_field(j, "type", w);
  if (type == "Split") return std::make_unique<Split>(j, w);
  if (type == "Metaspace") return std::make_unique<Metaspace>(j, w);
  if (type == "Sequence") {
    const auto& list = field(j, "pretokenizers", w);
    if (!list.is_array()) fail_at(w.at("pretokenizers"), "expected a list of pre-tokenizers");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < list.size(); ++i)
      if (auto p = parse_pre_tokenizer(list[i], w.at("pretokenizers").index(i)))
        parts.push_back(std::move(p));
    return std::make_unique<Sequence>(std::move(parts));
  }
  fail_at(w, str_cat("the pre-tokenizer \"", type,
                     "\" is not supported (supported: Split, Metaspace, Sequence); gemmax does "
                     "not approximate it"));
}

}  // namespace gemmax::hf
