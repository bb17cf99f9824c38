// Regexes of tokenizer.json patterns, through PCRE2 (UTF-8, Unicode classes as Oniguruma's).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gemmax::hf {

// UTF-8: the length of the character that starts with byte c.
inline size_t utf8_len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

class Regex {
 public:
  // what: where the pattern came from, for the error on a pattern PCRE2 cannot compile.
  Regex(const std::string& pattern, std::string_view what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Appends the non-overlapping matches of valid UTF-8 text, as the library's find_iter makes
  // them: an empty match right at the previous match's end is skipped, one character on.
  void find(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  void* code_;                  // pcre2_code_8
  std::string pattern_, what_;  // for the error of a match PCRE2 gives up on
};

}  // namespace gemmax::hf
