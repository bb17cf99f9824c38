#define PCRE2_CODE_UNIT_WIDTH 8
#include "gemmax/data/hf_regex.h"

#include <pcre2.h>

#include <memory>

#include "gemmax/base/error.h"

namespace gemmax::hf {
namespace {

pcre2_code* code(void* p) { return static_cast<pcre2_code*>(p); }

// Per thread: match data, and a JIT stack that grows to 8 MiB (the default 32 KiB on the machine
// stack would fail patterns that backtrack deeply, where Oniguruma succeeds).
struct MatchData {
  pcre2_match_data* data = pcre2_match_data_create(32, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 << 10, 8 << 20, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  MatchData() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchData() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

// Oniguruma's classes where PCRE2's differ (measured against the library): \w is a letter, mark,
// number or connector punctuation (inside [...]: decimal and letter numbers only), \b and \B
// follow that \w, \h is a hex digit and [:alpha:] the Alphabetic property. PCRE2 with UCP has
// \d, \s and \p{...} as Oniguruma's.
constexpr std::string_view kWord = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
constexpr std::string_view kWordInClass = "\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}";

std::string oniguruma_to_pcre2(const std::string& p, std::string_view what) {
  const std::string w = str_cat("[", kWord, "]"), nw = str_cat("[^", kWord, "]");
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char ch = p[i];
    if (ch == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      if (in_class) {
        if (e == 'w')
          out += kWordInClass;
        else if (e == 'h')
          out += "0-9a-fA-F";
        else if (e == 'W' || e == 'H')
          fail(what, ": the regex '", p, "' has \\", e,
               " inside [...], which gemmax cannot give Oniguruma's meaning; write the class out");
        else
          (out += '\\') += e;
        continue;
      }
      if (e == 'w')
        out += w;
      else if (e == 'W')
        out += nw;
      else if (e == 'b')
        out += str_cat("(?:(?<=", w, ")(?!", w, ")|(?<!", w, ")(?=", w, "))");
      else if (e == 'B')
        out += str_cat("(?:(?<=", w, ")(?=", w, ")|(?<!", w, ")(?!", w, "))");
      else if (e == 'h')
        out += "[0-9a-fA-F]";
      else if (e == 'H')
        out += "[^0-9a-fA-F]";
      else
        (out += '\\') += e;
      continue;
    }
    if (!in_class && ch == '[') {
      in_class = true;
      out += ch;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ] is literal
      continue;
    }
    if (in_class && ch == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:]
      const size_t end = p.find(":]", i + 2);
      if (end != std::string::npos) {
        const std::string name = p.substr(i + 2, end - i - 2);
        if (name != "alpha")
          fail(what, ": the regex '", p, "' has the POSIX class [:", name,
               ":], whose Oniguruma meaning gemmax does not reproduce; write it with \\p{...}");
        out += "\\p{Alphabetic}";  // Oniguruma's [:alpha:] is the Alphabetic property
        i = end + 1;
        continue;
      }
    }
    if (in_class && ch == ']') in_class = false;
    out += ch;
  }
  return out;
}

}  // namespace

Regex::Regex(const std::string& onig_pattern, std::string_view what)
    : pattern_(onig_pattern), what_(what) {
  const std::string pattern = oniguruma_to_pcre2(onig_pattern, what);
  int err = 0;
  PCRE2_SIZE at = 0;
  // UTF and UCP: classes and properties are Unicode's, as Oniguruma's are on UTF-8 text.
  pcre2_code* c = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
  if (!c) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail(what, ": the regex '", onig_pattern, "' does not compile (", reinterpret_cast<char*>(msg),
         " at offset ", at, "); give a pattern in Oniguruma/PCRE syntax");
  }
  pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);  // where JIT is unavailable, the interpreter runs
  code_ = c;
}

Regex::~Regex() { pcre2_code_free(code(code_)); }

void Regex::find(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  thread_local MatchData md;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t from = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (from <= text.size()) {
    const int rc = pcre2_match(code(code_), subject, text.size(), from, PCRE2_NO_UTF_CHECK, md.data,
                               md.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fail(what_, ": the regex '", pattern_, "' failed on a text of ", text.size(),
           " bytes: ", reinterpret_cast<char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.data);
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
