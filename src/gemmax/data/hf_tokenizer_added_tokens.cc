// Added tokens found in text before the model runs, as the library's AddedVocabulary: the
// leftmost match, longest among those, non-overlapping; single_word, lstrip and rstrip as its.
#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include "gemmax/base/error.h"
#include "gemmax/data/hf_tokenizer.h"

namespace gemmax::hf {
namespace {

UChar32 char_before(std::string_view s, size_t end) {
  if (end == 0) return -1;
  int32_t i = int32_t(end);
  UChar32 c;
  U8_PREV(reinterpret_cast<const uint8_t*>(s.data()), 0, i, c);
  return c;
}
UChar32 char_at(std::string_view s, size_t at) {
  if (at >= s.size()) return -1;
  int32_t i = int32_t(at);
  UChar32 c;
  U8_NEXT(reinterpret_cast<const uint8_t*>(s.data()), i, int32_t(s.size()), c);
  return c;
}
// A word character as the library's single_word test finds one (Rust regex's Unicode \w):
// alphabetic, a mark, a decimal digit, connector punctuation or a joiner.
bool word_char(UChar32 c) {
  if (c < 0) return false;
  const int8_t t = u_charType(c);
  return u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || t == U_NON_SPACING_MARK ||
         t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK || t == U_DECIMAL_DIGIT_NUMBER ||
         t == U_CONNECTOR_PUNCTUATION || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL);
}
bool whitespace(UChar32 c) { return c >= 0 && u_isUWhiteSpace(c); }

}  // namespace

void check_utf8(std::string_view text, std::string_view what) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const int32_t n = int32_t(text.size());
  if (text.size() > size_t(INT32_MAX)) fail(what, ": text of ", text.size(), " bytes is too long");
  for (int32_t i = 0; i < n;) {
    const int32_t at = i;
    UChar32 c;
    U8_NEXT(s, i, n, c);
    if (c < 0)
      fail(what, ": the text is not valid UTF-8 (byte ", at, " is 0x", std::hex, int(s[at]),
           "); a tokenizer.json encodes Unicode text: fix or drop the bytes");
  }
}

AddedTokenMatcher::AddedTokenMatcher(std::vector<const AddedToken*> tokens,
                                     std::vector<std::string> patterns)
    : tokens_(std::move(tokens)) {
  nodes_.emplace_back();
  for (size_t k = 0; k < tokens_.size(); ++k) {
    const std::string& p = patterns[k];
    if (p.empty()) continue;  // an empty pattern never matches
    first_byte_[uint8_t(p[0])] = true;
    int32_t node = 0;
    for (char c : p) {
      int32_t child = -1;
      for (auto [b, n] : nodes_[node].next)
        if (b == uint8_t(c)) child = n;
      if (child < 0) {
        child = int32_t(nodes_.size());
        nodes_[node].next.emplace_back(uint8_t(c), child);
        nodes_.emplace_back();
      }
      node = child;
    }
    if (nodes_[node].token < 0) nodes_[node].token = int32_t(k);  // a duplicate: the first wins
  }
}

void AddedTokenMatcher::split(Piece&& piece, std::vector<Piece>& out) const {
  const std::string_view t = piece.text;
  if (tokens_.empty() || t.empty()) {
    if (!t.empty()) out.push_back(std::move(piece));
    return;
  }
  std::vector<Piece> found;
  size_t start_offset = 0;
  auto push_text = [&](size_t b, size_t e) {
    if (b < e) found.push_back({std::string(t.substr(b, e - b)), -1, piece.at_origin && b == 0});
  };
  for (size_t i = 0; i < t.size();) {
    if (!first_byte_[uint8_t(t[i])]) {
      ++i;
      continue;
    }
    int32_t node = 0, best = -1;
    size_t best_end = 0;
    for (size_t j = i; j < t.size(); ++j) {
      int32_t child = -1;
      for (auto [b, n] : nodes_[node].next)
        if (b == uint8_t(t[j])) child = n;
      if (child < 0) break;
      node = child;
      if (nodes_[node].token >= 0) {
        best = nodes_[node].token;
        best_end = j + 1;
      }
    }
    if (best < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = *tokens_[best];
    size_t start = i, stop = best_end;
    i = best_end;  // the scan goes on after the match, used or not
    if (tok.single_word && (word_char(char_before(t, start)) || word_char(char_at(t, stop))))
      continue;
    if (tok.lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t p = s - 1;
        while (p > 0 && (uint8_t(t[p]) & 0xC0) == 0x80) --p;
        if (!whitespace(char_at(t, p))) break;
        s = p;
      }
      start = std::max(s, start_offset);
    }
    if (tok.rstrip)
      while (stop < t.size() && whitespace(char_at(t, stop))) stop += utf8_len(uint8_t(t[stop]));
    push_text(start_offset, start);
    found.push_back({std::string(t.substr(start, stop - start)), tok.id, false});
    start_offset = stop;
  }
  push_text(start_offset, t.size());
  for (Piece& p : found) out.push_back(std::move(p));
}

}  // namespace gemmax::hf
