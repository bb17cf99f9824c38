#define PCRE2_CODE_UNIT_WIDTH 8
#include "gemmax/data/hf_regex.h"

#include <pcre2.h>

#include <memory>

#include "gemmax/base/error.h"

namespace gemmax::hf {
namespace {

pcre2_code* code(void* p) { return static_cast<pcre2_code*>(p); }

struct MatchData {
  pcre2_match_data* data;
  ~MatchData() { pcre2_match_data_free(data); }
};

}  // namespace

Regex::Regex(const std::string& pattern, std::string_view what) {
  int err = 0;
  PCRE2_SIZE at = 0;
  // UCP: \d, \w, \s and POSIX classes are Unicode's, as Oniguruma's are on UTF-8 text.
  pcre2_code* c = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
  if (!c) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail(what, ": the regex '", pattern, "' does not compile (", reinterpret_cast<char*>(msg),
         " at offset ", at, "); give a pattern in Oniguruma/PCRE syntax");
  }
  pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);  // where JIT is unavailable, the interpreter runs
  code_ = c;
}

Regex::~Regex() { pcre2_code_free(code(code_)); }

void Regex::find(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  thread_local std::unique_ptr<MatchData> md;
  if (!md) md.reset(new MatchData{pcre2_match_data_create(32, nullptr)});
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t from = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (from <= text.size()) {
    const int rc = pcre2_match(code(code_), subject, text.size(), from, PCRE2_NO_UTF_CHECK,
                               md->data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0 && rc != 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fail("regex match failed: ", reinterpret_cast<char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md->data);
    const size_t s = ov[0], e = ov[1];
    if (s == e && have_last && last_end == e) {
      from += from < text.size() ? utf8_len(uint8_t(text[from])) : 1;
      continue;
    }
    out.emplace_back(s, e);
    from = e;
    last_end = e;
    have_last = true;
  }
}

}  // namespace gemmax::hf
