#include "gemmax/data/jinja_value.h"

#include "gemmax/data/jinja_number.h"

#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace gemmax::jinja {

Value Value::undefined(std::string name) {
  Value v;
  v.s = std::move(name);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::Bool;
  v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::Int;
  v.i = x;
  return v;
}
Value Value::number(double x) {
  Value v;
  v.kind = Kind::Float;
  v.f = x;
  return v;
}
namespace {
thread_local Budget* current_budget = nullptr;

// Makes `bytes` of strings and lists: their bytes, and a step per kBytesPerStep of them.
void charge(size_t bytes) {
  Budget* b = current_budget;
  if (!b) return;
  if ((b->bytes += int64_t(bytes)) > b->max_bytes) throw BudgetExceeded{};
  scan(bytes);
}

// What a list or dict of these values takes, its strings copied into it.
size_t bytes_of(const Value& e) { return sizeof(Value) + e.s.size(); }
}  // namespace

void check_budget(size_t bytes) {
  const Budget* b = current_budget;
  if (b && (bytes > size_t(b->max_bytes) || b->bytes + int64_t(bytes) > b->max_bytes))
    throw BudgetExceeded{};
}

void check_string(size_t bytes) {
  if (current_budget && bytes > kMaxString) throw StringTooLong{};
  check_budget(bytes);
}

void spend_steps(int64_t n) {
  Budget* b = current_budget;
  if (b && (b->steps += n) > b->max_steps) throw StepsExceeded{};
}

BudgetScope::BudgetScope(Budget& b) : previous_(current_budget) { current_budget = &b; }
BudgetScope::~BudgetScope() { current_budget = previous_; }

Value Value::integer(const mpz_class& x) {
  if (x.fits_slong_p()) return integer(int64_t(x.get_si()));
  charge(mpz_sizeinbase(x.get_mpz_t(), 2) / 8);
  Value v;
  v.kind = Kind::Int;
  v.big = std::make_shared<const mpz_class>(x);
  return v;
}
mpz_class Value::as_mpz() const {
  if (big) return *big;
  return mpz_class(static_cast<long>(kind == Kind::Bool ? int64_t(b) : i));
}
double Value::as_double() const {
  if (kind == Kind::Float) return f;
  return to_float(*this);
}
Value Value::string(std::string x) {
  charge(x.size());
  Value v;
  v.kind = Kind::String;
  v.s = std::move(x);
  return v;
}
Value Value::make_list(std::vector<Value> x, bool tuple) {
  size_t bytes = 0;
  for (const Value& e : x) bytes += bytes_of(e);  // its strings were copied into it
  spend_steps(int64_t(x.size()));
  charge(bytes);
  Value v;
  v.kind = Kind::List;
  v.list = std::make_shared<std::vector<Value>>(std::move(x));
  v.tuple = tuple;
  return v;
}
Value Value::make_dict(Items items) {
  size_t bytes = 0;
  for (const auto& [k, e] : items) bytes += k.size() + bytes_of(e);
  spend_steps(int64_t(items.size()));
  charge(bytes);
  Value v;
  v.kind = Kind::Dict;
  v.dict = std::make_shared<Items>(std::move(items));
  return v;
}
Value Value::make_namespace(Items items) {
  Value v = make_dict(std::move(items));
  v.kind = Kind::Namespace;
  return v;
}
Value Value::function(Function f) {
  Value v;
  v.kind = Kind::Function;
  v.fn = std::make_shared<Function>(std::move(f));
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return none();
    case nlohmann::ordered_json::value_t::boolean:
      return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u <= uint64_t(INT64_MAX)) return integer(int64_t(u));
      mpz_class m;
      mpz_import(m.get_mpz_t(), 1, 1, sizeof u, 0, 0, &u);
      return integer(m);
    }
    case nlohmann::ordered_json::value_t::number_float:
      return number(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      for (const auto& e : j) items.push_back(from_json(e));
      return make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Items items;
      for (const auto& [k, e] : j.items()) items.emplace_back(k, from_json(e));
      return make_dict(std::move(items));
    }
    default:
      return none();
  }
}

const Value* Value::find(const std::string& key) const {
  if (!dict) return nullptr;
  spend_steps(int64_t(dict->size() / 16));  // a linear search: a literal may have 1000s of keys
  for (const auto& [k, v] : *dict)
    if (k == key) return &v;
  return nullptr;
}
Value* Value::find(const std::string& key) {
  return const_cast<Value*>(static_cast<const Value*>(this)->find(key));
}

const char* type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
      return "undefined";
    case Value::Kind::None:
      return "NoneType";
    case Value::Kind::Bool:
      return "bool";
    case Value::Kind::Int:
      return "int";
    case Value::Kind::Float:
      return "float";
    case Value::Kind::String:
      return "str";
    case Value::Kind::List:
      return v.tuple ? "tuple" : "list";
    case Value::Kind::Dict:
      return "dict";
    case Value::Kind::Namespace:
      return "Namespace";
    case Value::Kind::Function:
      return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return false;
    case Value::Kind::Bool:
      return v.b;
    case Value::Kind::Int:
      return v.big || v.i != 0;
    case Value::Kind::Float:
      return v.f != 0;
    case Value::Kind::String:
      return !v.s.empty();
    case Value::Kind::List:
      return !v.list->empty();
    case Value::Kind::Dict:
      return !v.dict->empty();
    default:
      return true;
  }
}

bool equal(const Value& a, const Value& b) {
  spend_steps(1);  // lists that hold one list twice are compared as trees: exponential work
  if (a.is_number() && b.is_number()) return compare_numbers(a, b) == 0;
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
      return a.s == b.s;
    case Value::Kind::List:
      if (a.tuple != b.tuple || a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i)
        if (!equal((*a.list)[i], (*b.list)[i])) return false;
      return true;
    case Value::Kind::Dict:
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, v] : *a.dict) {
        const Value* w = b.find(k);
        if (!w || !equal(v, *w)) return false;
      }
      return true;
    default:
      return a.dict == b.dict && a.fn == b.fn;
  }
}

namespace {

// Python's repr of a float: the shortest digits that round-trip, positional for exponents in
// [-4, 16), else d.ddde+XX.
std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, end);  // [-]d[.ddd]e[+-]XX
  const size_t e = sci.find('e');
  const int exponent = std::stoi(sci.substr(e + 1));
  std::string sign = sci[0] == '-' ? "-" : "";
  std::string digits;
  for (size_t k = sign.size(); k < e; ++k)
    if (sci[k] != '.') digits += sci[k];
  if (exponent < -4 || exponent >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ex[16];
    std::snprintf(ex, sizeof ex, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + ex;
  }
  if (exponent < 0) return sign + "0." + std::string(size_t(-exponent - 1), '0') + digits;
  if (digits.size() <= size_t(exponent) + 1) {
    digits.resize(size_t(exponent) + 1, '0');
    return sign + digits + ".0";
  }
  return sign + digits.substr(0, size_t(exponent) + 1) + "." + digits.substr(size_t(exponent) + 1);
}

// Python's repr() of a str: quoted, with \\, the quote, \\n \\r \\t and every code point that
// is not printable escaped as \\xNN, \\uNNNN or \\UNNNNNNNN.
void string_repr(const std::string& s, std::string& out) {
  check_string(out.size() + s.size() + 2);
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  out += q;
  for (size_t at = 0; at < s.size();) {
    const size_t begin = at;
    const uint32_t c = next_code_point(s, at);
    if (c == uint32_t(q) || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!py_printable(c)) {
      char buf[16];
      std::snprintf(buf, sizeof buf,
                    c < 0x100     ? "\\x%02x"
                    : c < 0x10000 ? "\\u%04x"
                                  : "\\U%08x",
                    c);
      out += buf;
    } else {
      out.append(s, begin, at - begin);
    }
  }
  out += q;
  check_string(out.size());
}

void json_string(const std::string& s, bool ensure_ascii, std::string& out) {
  check_string(out.size() + s.size() + 2);
  out += '"';
  char buf[16];
  for (size_t at = 0; at < s.size();) {
    const size_t begin = at;
    const uint32_t c = next_code_point(s, at);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7e && c < 0x10000)) {
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else if (ensure_ascii && c >= 0x10000) {  // a surrogate pair, as Python writes it
          const uint32_t v = c - 0x10000;
          std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
          out += buf;
        } else {
          out.append(s, begin, at - begin);
        }
    }
  }
  out += '"';
  check_string(out.size());
}

// Every element visited costs a step and every string grown is checked before it grows: a
// list that holds another twice, nested, is a tree of exponential size.
void json_dump(const Value& v, const JsonStyle& style, int depth, std::string& out) {
  spend_steps(1);
  auto newline = [&](int d) {
    if (!style.indent) return;
    check_string(out.size() + 1 + size_t(d) * style.indent->size());
    out += '\n';
    for (int k = 0; k < d; ++k) out += *style.indent;
  };
  switch (v.kind) {
    case Value::Kind::None:
      out += "null";
      return;
    case Value::Kind::Bool:
      out += v.b ? "true" : "false";
      return;
    case Value::Kind::Int:
      out += repr(v);
      return;
    case Value::Kind::Float:
      if (std::isnan(v.f))
        out += "NaN";
      else if (std::isinf(v.f))
        out += v.f > 0 ? "Infinity" : "-Infinity";
      else
        out += float_repr(v.f);
      return;
    case Value::Kind::String:
      json_string(v.s, style.ensure_ascii, out);
      return;
    case Value::Kind::List:
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += style.item_separator;
        check_string(out.size());
        newline(depth + 1);
        json_dump((*v.list)[k], style, depth + 1, out);
      }
      newline(depth);
      out += ']';
      return;
    case Value::Kind::Dict: {
      if (v.dict->empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& e : *v.dict) items.push_back(&e);
      if (style.sort_keys)  // by code point, which UTF-8's byte order is
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += style.item_separator;
        check_string(out.size());
        newline(depth + 1);
        json_string(items[k]->first, style.ensure_ascii, out);
        out += style.key_separator;
        json_dump(items[k]->second, style, depth + 1, out);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:  // Undefined, a namespace, a function: what json.dumps raises
      throw PyError{std::string("Object of type ") +
                    (v.kind == Value::Kind::Undefined ? "Undefined" : type_name(v)) +
                    " is not JSON serializable"};
  }
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
      return "";
    case Value::Kind::String:
      return v.s;
    default:
      return repr(v);
  }
}

namespace {
// repr() appended to `out`, as json_dump: a step per element, checked as the text grows.
void repr_into(const Value& v, std::string& out) {
  spend_steps(1);
  switch (v.kind) {
    case Value::Kind::Undefined:
      out += "Undefined";
      return;
    case Value::Kind::None:
      out += "None";
      return;
    case Value::Kind::Bool:
      out += v.b ? "True" : "False";
      return;
    case Value::Kind::Int: {
      if (!v.big) {
        out += std::to_string(v.i);
        return;
      }
      std::string digits = v.big->get_str();
      // Python 3.11's int_max_str_digits: str() of a longer int raises.
      if (digits.size() - (digits[0] == '-') > 4300)
        throw PyError{"Exceeds the limit (4300 digits) for integer string conversion, as Python's "
                      "sys.get_int_max_str_digits() sets it"};
      out += digits;
      return;
    }
    case Value::Kind::Float:
      out += float_repr(v.f);
      return;
    case Value::Kind::String:
      string_repr(v.s, out);
      return;
    case Value::Kind::List: {
      out += v.tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        repr_into((*v.list)[k], out);
        check_string(out.size());
      }
      if (v.tuple && v.list->size() == 1) out += ",";
      out += v.tuple ? ")" : "]";
      return;
    }
    case Value::Kind::Dict: {
      out += "{";
      bool first = true;
      for (const auto& [k, e] : *v.dict) {
        if (!first) out += ", ";
        string_repr(k, out);
        out += ": ";
        repr_into(e, out);
        check_string(out.size());
        first = false;
      }
      out += "}";
      return;
    }
    case Value::Kind::Namespace:
      out += "<Namespace>";
      return;
    case Value::Kind::Function:
      out += "<function>";
      return;
  }
}
}  // namespace

std::string repr(const Value& v) {
  std::string out;
  repr_into(v, out);
  return out;
}

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  json_dump(v, style, 0, out);
  return out;
}

size_t code_point_size(const std::string& s, size_t k) {
  const unsigned char c = s[k];
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (k + n > s.size()) return 1;
  for (size_t m = 1; m < n; ++m)
    if ((static_cast<unsigned char>(s[k + m]) & 0xC0) != 0x80) return 1;
  return n;
}

size_t count_code_points(const std::string& s) {
  size_t n = 0;
  for (size_t k = 0; k < s.size(); k += code_point_size(s, k)) ++n;
  return n;
}

std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (size_t k = 0; k < s.size();) {
    const size_t n = code_point_size(s, k);
    out.push_back(s.substr(k, n));
    k += n;
  }
  return out;
}

bool is_py_space(const std::string& cp) {
  if (cp.size() == 1) {
    const unsigned char c = cp[0];
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  }
  // The rest of CPython's _PyUnicode_IsWhitespace table, as UTF-8.
  static const char* const kWide[] = {"\u0085", "\u00A0", "\u1680", "\u2000", "\u2001",
                                      "\u2002", "\u2003", "\u2004", "\u2005", "\u2006",
                                      "\u2007", "\u2008", "\u2009", "\u200A", "\u2028",
                                      "\u2029", "\u202F", "\u205F", "\u3000"};
  for (const char* w : kWide)
    if (cp == w) return true;
  return false;
}

uint32_t next_code_point(const std::string& s, size_t& at) {
  const size_t begin = at;
  UChar32 c;
  U8_NEXT(reinterpret_cast<const uint8_t*>(s.data()), at, s.size(), c);
  if (c < 0) {  // invalid: the byte alone
    at = begin + 1;
    return static_cast<unsigned char>(s[begin]);
  }
  return uint32_t(c);
}

bool py_printable(uint32_t cp) {
  if (cp == ' ') return true;
  switch (u_charType(UChar32(cp))) {
    case U_CONTROL_CHAR:         // Cc
    case U_FORMAT_CHAR:          // Cf
    case U_SURROGATE:            // Cs
    case U_PRIVATE_USE_CHAR:     // Co
    case U_UNASSIGNED:           // Cn
    case U_LINE_SEPARATOR:       // Zl
    case U_PARAGRAPH_SEPARATOR:  // Zp
    case U_SPACE_SEPARATOR:      // Zs
      return false;
    default:
      return true;
  }
}

bool py_word_char(uint32_t cp) {
  if (cp == '_') return true;
  switch (u_charType(UChar32(cp))) {  // str.isalnum(): the letters and the numbers
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return true;
    default:
      return false;
  }
}

size_t py_space_at(const std::string& s, size_t at) {
  if (at >= s.size()) return 0;
  const unsigned char c = s[at];
  const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 0;
  return n && at + n <= s.size() && is_py_space(s.substr(at, n)) ? n : 0;
}

size_t py_space_before(const std::string& s, size_t end) {
  for (size_t n = 1; n <= 3 && n <= end; ++n)
    if (py_space_at(s, end - n) == n) return n;
  return 0;
}

}  // namespace gemmax::jinja
