// tokenizer.json normalizers: Replace, Prepend, NFC, NFKC and Sequence; and the patterns of
// Replace and Split.
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include <nlohmann/json.hpp>

#include "gemmax/base/error.h"
#include "gemmax/data/hf_tokenizer.h"

namespace gemmax::hf {

void fail_at(const Where& w, std::string_view problem) {
  fail(w.file, ": ", w.field.empty() ? std::string() : "field \"" + w.field + "\": ", problem);
}

// Shared reading of the JSON fields of a component.
const nlohmann::json& field(const nlohmann::json& j, const char* key, const Where& w) {
  if (!j.is_object() || !j.contains(key))
    fail_at(w, str_cat("missing \"", key, "\" (",
                       j.is_object() ? "an object without it" : j.type_name(), ")"));
  return j[key];
}
std::string string_field(const nlohmann::json& j, const char* key, const Where& w) {
  const auto& v = field(j, key, w);
  if (!v.is_string()) fail_at(w.at(key), str_cat("expected a string, got ", v.type_name()));
  return v.get<std::string>();
}

bool bool_field(const nlohmann::json& j, const char* key, bool fallback, const Where& w) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean())
    fail_at(w.at(key), str_cat("expected true or false, got ", j[key].dump()));
  return j[key].get<bool>();
}

Pattern Pattern::parse(const nlohmann::json& j, const Where& w) {
  Pattern p;
  if (j.is_object() && j.size() == 1 && j.contains("String") && j["String"].is_string()) {
    p.literal = j["String"].get<std::string>();
  } else if (j.is_object() && j.size() == 1 && j.contains("Regex") && j["Regex"].is_string()) {
    p.regex = std::make_unique<Regex>(j["Regex"].get<std::string>(),
                                      str_cat(w.file, ": field \"", w.field, "\""));
  } else {
    fail_at(w, str_cat("expected {\"String\": \"...\"} or {\"Regex\": \"...\"}, got ", j.dump()));
  }
  return p;
}

void Pattern::find(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  if (regex) return regex->find(text, out);
  if (literal.empty()) return;  // the library's empty string matches nothing
  for (size_t at = text.find(literal); at != std::string_view::npos;
       at = text.find(literal, at + literal.size()))
    out.emplace_back(at, at + literal.size());
}

namespace {

class Replace final : public Normalizer {
 public:
  Replace(Pattern p, std::string content) : pattern_(std::move(p)), content_(std::move(content)) {}
  void normalize(std::string& text) const override {
    thread_local std::vector<std::pair<size_t, size_t>> matches;
    matches.clear();
    pattern_.find(text, matches);
    if (matches.empty()) return;
    std::string out;
    out.reserve(text.size() + matches.size() * content_.size());
    size_t at = 0;
    for (auto [s, e] : matches) {
      out.append(text, at, s - at);
      out += content_;
      at = e;
    }
    out.append(text, at, std::string::npos);
    text = std::move(out);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string s) : prefix_(std::move(s)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class UnicodeForm final : public Normalizer {
 public:
  UnicodeForm(bool compat, const Where& w) {
    UErrorCode status = U_ZERO_ERROR;
    n_ = compat ? icu::Normalizer2::getNFKCInstance(status)
                : icu::Normalizer2::getNFCInstance(status);
    if (U_FAILURE(status)) fail_at(w, str_cat("ICU has no normalizer: ", u_errorName(status)));
  }
  void normalize(std::string& text) const override {
    UErrorCode status = U_ZERO_ERROR;
    if (n_->isNormalizedUTF8(text, status) && U_SUCCESS(status)) return;
    status = U_ZERO_ERROR;
    std::string out;
    icu::StringByteSink<std::string> sink(&out, int32_t(text.size()));
    n_->normalizeUTF8(0, text, sink, nullptr, status);
    if (U_FAILURE(status)) fail("Unicode normalization failed: ", u_errorName(status));
    text = std::move(out);
  }

 private:
  const icu::Normalizer2* n_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& text) const override {
    for (const auto& p : parts_) p->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> parse_normalizer(const nlohmann::json& j, const Where& w) {
  if (j.is_null()) return nullptr;
  const std::string type = string_field(j, "type", w);
  if (type == "Replace")
    return std::make_unique<Replace>(Pattern::parse(field(j, "pattern", w), w.at("pattern")),
                                     string_field(j, "content", w));
  if (type == "Prepend") return std::make_unique<Prepend>(string_field(j, "prepend", w));
  if (type == "NFC" || type == "NFKC") return std::make_unique<UnicodeForm>(type == "NFKC", w);
  if (type == "Sequence") {
    const auto& list = field(j, "normalizers", w);
    if (!list.is_array()) fail_at(w.at("normalizers"), "expected a list of normalizers");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < list.size(); ++i)
      if (auto p = parse_normalizer(list[i], w.at("normalizers").index(i)))
        parts.push_back(std::move(p));
    return std::make_unique<Sequence>(std::move(parts));
  }
  fail_at(w, str_cat("the normalizer \"", type,
                     "\" is not supported (supported: Replace, Prepend, NFC, NFKC, Sequence); "
                     "gemmax does not approximate it"));
}

}  // namespace gemmax::hf
