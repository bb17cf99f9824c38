// tokenizer.json decoders: Replace, ByteFallback, Fuse, Strip, Metaspace and Sequence, each a
// step over the list of token strings, as the library's decode_chain.
#include <nlohmann/json.hpp>

#include "gemmax/base/error.h"
#include "gemmax/data/hf_tokenizer.h"

namespace gemmax::hf {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

class Replace final : public Decoder {
 public:
  Replace(Pattern p, std::string content) : pattern_(std::move(p)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::pair<size_t, size_t>> matches;
    for (std::string& t : tokens) {
      matches.clear();
      pattern_.find(t, matches);
      if (matches.empty()) continue;
      std::string out;
      size_t at = 0;
      for (auto [s, e] : matches) {
        out.append(t, at, s - at);
        out += content_;
        at = e;
      }
      out.append(t, at, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// "<0xAB>" -> the byte, as Rust's u8::from_str_radix(.., 16) reads the two characters.
int byte_of(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
  };
  const char a = t[3], b = t[4];
  if (a == '+') return hex(b);
  return hex(a) < 0 || hex(b) < 0 ? -1 : hex(a) * 16 + hex(b);
}

bool valid_utf8(std::string_view s) {
  try {
    check_utf8(s, "");
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Consecutive byte tokens become their text when they are valid UTF-8, else one U+FFFD each.
class ByteFallback final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string bytes;
    size_t count = 0;
    auto flush = [&] {
      if (count == 0) return;
      if (valid_utf8(bytes))
        out.push_back(bytes);
      else
        for (size_t k = 0; k < count; ++k) out.emplace_back(kReplacementChar);
      bytes.clear();
      count = 0;
    };
    for (std::string& t : tokens) {
      if (const int b = byte_of(t); b >= 0) {
        bytes += char(b);
        ++count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class Fuse final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Up to `start` leading and `stop` trailing `content` characters off each token.
class Strip final : public Decoder {
 public:
  Strip(std::string c, size_t start, size_t stop) : c_(std::move(c)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      size_t b = 0, e = t.size();
      for (size_t k = 0; k < start_ && t.compare(b, c_.size(), c_) == 0 && b < e; ++k)
        b += c_.size();
      for (size_t k = 0;
           k < stop_ && e >= b + c_.size() && t.compare(e - c_.size(), c_.size(), c_) == 0; ++k)
        e -= c_.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  std::string c_;
  size_t start_, stop_;
};

// The replacement character becomes a space; in the first token it is dropped, unless the
// pre-tokenizer never prepends one.
class Metaspace final : public Decoder {
 public:
  Metaspace(std::string r, bool drop_first) : r_(std::move(r)), drop_first_(drop_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      std::string out;
      for (size_t at = 0; at < t.size();) {
        if (t.compare(at, r_.size(), r_) == 0) {
          if (!(i == 0 && drop_first_)) out += ' ';
          at += r_.size();
        } else {
          out += t[at++];
        }
      }
      t = std::move(out);
    }
  }

 private:
  std::string r_;
  bool drop_first_;
};

class Sequence final : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

size_t count_field(const nlohmann::json& j, const char* key, const Where& w) {
  const auto& v = field(j, key, w);
  if (!v.is_number_unsigned()) fail_at(w.at(key), str_cat("expected a count, got ", v.dump()));
  return v.get<size_t>();
}

}  // namespace

std::unique_ptr<Decoder> parse_decoder(const nlohmann::json& j, const Where& w) {
  if (j.is_null()) return nullptr;
  const std::string type = string_field(j, "type", w);
  if (type == "Replace")
    return std::make_unique<Replace>(Pattern::parse(field(j, "pattern", w), w.at("pattern")),
                                     string_field(j, "content", w));
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip") {
    const std::string c = string_field(j, "content", w);
    if (c.empty() || utf8_len(uint8_t(c[0])) != c.size())
      fail_at(w.at("content"), str_cat("expected one character, got \"", c, "\""));
    return std::make_unique<Strip>(c, count_field(j, "start", w), count_field(j, "stop", w));
  }
  if (type == "Metaspace") {
    const std::string r = string_field(j, "replacement", w);
    if (r.empty() || utf8_len(uint8_t(r[0])) != r.size())
      fail_at(w.at("replacement"), str_cat("expected one character, got \"", r, "\""));
    bool never = false;
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
      const std::string s = string_field(j, "prepend_scheme", w);
      if (s != "always" && s != "first" && s != "never")
        fail_at(w.at("prepend_scheme"),
                str_cat("expected always, first or never, got \"", s, "\""));
      never = s == "never";
    } else {
      never = !bool_field(j, "add_prefix_space", true, w);
    }
    return std::make_unique<Metaspace>(r, !never);
  }
  if (type == "Sequence") {
    const auto& list = field(j, "decoders", w);
    if (!list.is_array()) fail_at(w.at("decoders"), "expected a list of decoders");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (size_t i = 0; i < list.size(); ++i)
      if (auto p = parse_decoder(list[i], w.at("decoders").index(i))) parts.push_back(std::move(p));
    return std::make_unique<Sequence>(std::move(parts));
  }
  fail_at(w, str_cat("the decoder \"", type,
                     "\" is not supported (supported: Replace, ByteFallback, Fuse, Strip, "
                     "Metaspace, Sequence); gemmax does not approximate it"));
}

}  // namespace gemmax::hf
