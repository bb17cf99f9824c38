#include "gemmax/data/jinja_number.h"

#include <unicode/uchar.h>

#include <cmath>
#include <cstdlib>

namespace gemmax::jinja {
namespace {

bool is_float(const Value& v) { return v.kind == Value::Kind::Float; }

// p / q correctly rounded to the nearest double, ties to even (q > 0), as Python's int / int
// and float(int) are; nullopt when it overflows.
std::optional<double> rational_to_double(const mpz_class& p, const mpz_class& q) {
  if (p == 0) return 0.0;
  const mpz_class a = abs(p);
  // Scale so that the quotient has 54 bits (53 and a rounding bit's worth of room).
  const long shift = long(mpz_sizeinbase(a.get_mpz_t(), 2)) -
                     long(mpz_sizeinbase(q.get_mpz_t(), 2)) - 54;
  mpz_class num = a, den = q;
  if (shift > 0)
    den <<= shift;
  else
    num <<= -shift;
  mpz_class n, r;
  mpz_tdiv_qr(n.get_mpz_t(), r.get_mpz_t(), num.get_mpz_t(), den.get_mpz_t());
  // n has 54 or 55 bits: keep 53, rounding what falls off half to even on the exact remainder.
  const int extra = int(mpz_sizeinbase(n.get_mpz_t(), 2)) - 53;
  long exponent = shift + extra;
  mpz_class low = n & ((mpz_class(1) << extra) - 1);
  n >>= extra;
  const mpz_class half = mpz_class(1) << (extra - 1);
  if (low > half || (low == half && (r != 0 || mpz_odd_p(n.get_mpz_t())))) ++n;
  // Below the normal range fewer bits remain; ldexp of the 53-bit n rounds once more there,
  // which the gradual-underflow tail of a chat template never reaches.
  const double m = n.get_d();
  if (exponent > 1100) return std::nullopt;
  const double out = std::ldexp(m, int(std::max<long>(exponent, -1200)));
  if (std::isinf(out)) return std::nullopt;
  return p < 0 ? -out : out;
}

// An exact double as a rational (every finite double is one).
mpq_class exact(double x) {
  mpq_class q;
  mpq_set_d(q.get_mpq_t(), x);
  return q;
}

Value float_arithmetic(const std::string& op, double x, double y) {
  if (op == "+") return Value::number(x + y);
  if (op == "-") return Value::number(x - y);
  if (op == "*") return Value::number(x * y);
  if (op == "/") {
    if (y == 0) throw PyError{"float division by zero"};
    return Value::number(x / y);
  }
  if (op == "//" || op == "%") {  // CPython's float_divmod
    if (y == 0) throw PyError{op == "%" ? "float modulo" : "float floor division by zero"};
    double mod = std::fmod(x, y), div = (x - mod) / y;
    if (mod != 0) {
      if ((y < 0) != (mod < 0)) {
        mod += y;
        div -= 1.0;
      }
    } else {
      mod = std::copysign(0.0, y);
    }
    double floordiv;
    if (div != 0) {
      floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
      floordiv = std::copysign(0.0, x / y);
    }
    return Value::number(op == "//" ? floordiv : mod);
  }
  if (op == "**") {
    if (x == 0 && y < 0) throw PyError{"0.0 cannot be raised to a negative power"};
    if (x < 0 && std::isfinite(y) && y != std::floor(y))
      throw PyError{"a negative number to a fractional power is a complex number, which "
                    "templates do not have"};
    const double r = std::pow(x, y);
    if (std::isinf(r) && std::isfinite(x) && std::isfinite(y))
      throw PyError{"(34, 'Numerical result out of range')"};
    return Value::number(r);
  }
  throw PyError{"unsupported operator " + op};
}

Value int_arithmetic(const std::string& op, const Value& a, const Value& b) {
  const auto sa = small_int(a), sb = small_int(b);
  if (sa && sb && op != "/" && op != "**") {
    int64_t r;
    const int64_t x = *sa, y = *sb;
    if (op == "+" && !__builtin_add_overflow(x, y, &r)) return Value::integer(r);
    if (op == "-" && !__builtin_sub_overflow(x, y, &r)) return Value::integer(r);
    if (op == "*" && !__builtin_mul_overflow(x, y, &r)) return Value::integer(r);
    if ((op == "//" || op == "%") && y != 0 && !(x == INT64_MIN && y == -1)) {
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::integer(op == "//" ? q : m);
    }
  }
  const mpz_class x = a.as_mpz(), y = b.as_mpz();
  if (op == "+") return Value::integer(mpz_class(x + y));
  if (op == "-") return Value::integer(mpz_class(x - y));
  if (op == "*") {
    check_budget((mpz_sizeinbase(x.get_mpz_t(), 2) + mpz_sizeinbase(y.get_mpz_t(), 2)) / 8);
    return Value::integer(mpz_class(x * y));
  }
  if (op == "/") {
    if (y == 0) throw PyError{"division by zero"};
    const auto r = rational_to_double(y < 0 ? mpz_class(-x) : x, abs(y));
    if (!r) throw PyError{"integer division result too large for a float"};
    const bool negative = (x < 0) != (y < 0);  // 0 / -1 is -0.0, as the signs say
    return Value::number(*r == 0 ? std::copysign(0.0, negative ? -1.0 : 1.0) : *r);
  }
  if (op == "//" || op == "%") {
    if (y == 0) throw PyError{"integer division or modulo by zero"};
    mpz_class q, m;
    mpz_fdiv_qr(q.get_mpz_t(), m.get_mpz_t(), x.get_mpz_t(), y.get_mpz_t());  // floor, as Python
    return Value::integer(op == "//" ? q : m);
  }
  if (op == "**") {
    if (y < 0) {  // a float, as Python's int.__pow__ gives
      if (x == 0) throw PyError{"0.0 cannot be raised to a negative power"};
      return float_arithmetic("**", to_float(a), to_float(b));
    }
    if (x == 0 || x == 1) return Value::integer(y == 0 ? int64_t(1) : x.get_si());
    if (x == -1) return Value::integer(int64_t(mpz_odd_p(y.get_mpz_t()) ? -1 : 1));
    // The result has about y * log2|x| bits: charge them before GMP allocates them.
    const double bits = y.get_d() * double(mpz_sizeinbase(x.get_mpz_t(), 2));
    check_budget(bits > 1e15 ? size_t(1) << 60 : size_t(bits / 8));
    mpz_class r;
    mpz_pow_ui(r.get_mpz_t(), x.get_mpz_t(), y.get_ui());
    return Value::integer(r);
  }
  throw PyError{"unsupported operator " + op};
}

// Python's digits: ASCII and every Unicode decimal digit (int('٣') is 3), as their values.
int digit_value(uint32_t cp) {
  if (cp < 0x80) {
    if (cp >= '0' && cp <= '9') return int(cp - '0');
    if (cp >= 'a' && cp <= 'z') return int(cp - 'a' + 10);
    if (cp >= 'A' && cp <= 'Z') return int(cp - 'A' + 10);
    return -1;
  }
  return u_charType(UChar32(cp)) == U_DECIMAL_DIGIT_NUMBER ? u_charDigitValue(UChar32(cp)) : -1;
}

// The text between Python's Unicode whitespace at both ends.
std::string stripped(const std::string& s) {
  size_t b = 0, e = s.size();
  while (size_t n = py_space_at(s, b)) b += n;
  while (e > b) {
    const size_t n = py_space_before(s, e);
    if (!n) break;
    e -= n;
  }
  return s.substr(b, e - b);
}

}  // namespace

std::optional<int64_t> small_int(const Value& v) {
  if (v.kind == Value::Kind::Bool) return int64_t(v.b);
  if (v.kind != Value::Kind::Int || v.big) return std::nullopt;
  return v.i;
}

double to_float(const Value& v) {
  if (v.kind == Value::Kind::Float) return v.f;
  if (const auto s = small_int(v)) return double(*s);  // round to nearest, as Python's
  const auto r = rational_to_double(v.as_mpz(), 1);
  if (!r) throw PyError{"int too large to convert to float"};
  return *r;
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (is_float(a) || is_float(b)) return float_arithmetic(op, to_float(a), to_float(b));
  return int_arithmetic(op, a, b);
}

Value negate(const Value& v) {
  if (is_float(v)) return Value::number(-v.f);
  if (const auto s = small_int(v); s && *s != INT64_MIN) return Value::integer(-*s);
  return Value::integer(mpz_class(-v.as_mpz()));
}

Value absolute(const Value& v) {
  if (is_float(v)) return Value::number(std::fabs(v.f));
  if (const auto s = small_int(v); s && *s != INT64_MIN) return Value::integer(std::llabs(*s));
  return Value::integer(mpz_class(abs(v.as_mpz())));
}

std::partial_ordering compare_numbers(const Value& a, const Value& b) {
  if (!is_float(a) && !is_float(b)) {
    const auto sa = small_int(a), sb = small_int(b);
    if (sa && sb) return *sa <=> *sb;
    return cmp(a.as_mpz(), b.as_mpz()) <=> 0;
  }
  if (is_float(a) && is_float(b)) return a.f <=> b.f;
  // An int and a float, exactly (2**53 + 1 > 2.0**53 in Python).
  const double x = is_float(a) ? a.f : b.f;
  if (std::isnan(x)) return std::partial_ordering::unordered;
  const int c = cmp(is_float(a) ? b.as_mpz() : a.as_mpz(), x);  // GMP compares with inf too
  const std::partial_ordering int_vs_float = c <=> 0;
  return is_float(a) ? 0 <=> c : int_vs_float;
}

Value int_of_float(double x) {
  if (std::isnan(x)) throw PyError{"cannot convert float NaN to integer"};
  if (std::isinf(x)) throw PyError{"cannot convert float infinity to integer"};
  const double t = std::trunc(x);
  if (std::fabs(t) < 9.2e18) return Value::integer(int64_t(t));
  return Value::integer(mpz_class(t));
}

std::optional<Value> parse_int(const std::string& text, int base) {
  if (base != 0 && (base < 2 || base > 36))
    throw PyError{"int() base must be >= 2 and <= 36, or 0"};
  const std::string s = stripped(text);
  size_t at = 0;
  bool negative = false;
  if (at < s.size() && (s[at] == '+' || s[at] == '-')) negative = s[at++] == '-';
  // A prefix 0x / 0o / 0b: required by base 0 to choose, allowed where it matches the base.
  auto prefix = [&](char p, int b) {
    return (base == 0 || base == b) && at + 1 < s.size() && s[at] == '0' &&
           (s[at + 1] == p || s[at + 1] == p - 32);
  };
  bool prefixed = false;
  for (const auto& [p, b] : {std::pair{'x', 16}, {'o', 8}, {'b', 2}})
    if (prefix(p, b)) {
      base = b;
      at += 2;
      prefixed = true;
      break;
    }
  const bool zero_only_rule = base == 0;  // base 0 without a prefix: no leading zeros but 0
  if (base == 0) base = 10;
  // Digits with single underscores between them (and one allowed right after a prefix).
  std::string digits;
  bool underscore = false;
  while (at < s.size()) {
    if (s[at] == '_') {
      if (underscore || (digits.empty() && !prefixed)) return std::nullopt;
      underscore = true;
      ++at;
      continue;
    }
    const int d = digit_value(next_code_point(s, at));
    if (d < 0 || d >= base) return std::nullopt;
    digits += char(d < 10 ? '0' + d : 'a' + d - 10);
    underscore = false;
  }
  if (digits.empty() || underscore) return std::nullopt;
  // Python 3.11's int_max_str_digits, for the bases that are not powers of two: ValueError.
  if (digits.size() > 4300 && (base & (base - 1)) != 0) return std::nullopt;
  if (zero_only_rule && digits.size() > 1 && digits[0] == '0' &&
      digits.find_first_not_of('0') != std::string::npos)
    return std::nullopt;
  mpz_class m(digits, base);
  if (negative) m = -m;
  return Value::integer(m);
}

std::optional<double> parse_float(const std::string& text) {
  const std::string s = stripped(text);
  std::string ascii;  // what strtod reads: underscores out, Unicode digits as ASCII
  size_t at = 0;
  if (at < s.size() && (s[at] == '+' || s[at] == '-')) ascii += s[at++];
  std::string rest = s.substr(at);
  std::string lower;
  for (char c : rest) lower += char(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "inf" || lower == "infinity" || lower == "nan")
    return std::strtod((ascii + lower).c_str(), nullptr);
  // digits [. digits] [e [sign] digits], with single underscores between digits
  bool digit_before = false, seen_digit = false, seen_point = false, seen_exp = false;
  bool exp_digit = false;
  for (size_t k = at; k < s.size();) {
    if (s[k] == '_') {  // only between two digits
      size_t next = k + 1;
      if (!digit_before || next >= s.size()) return std::nullopt;
      const int d = digit_value(next_code_point(s, next));
      if (d < 0 || d > 9) return std::nullopt;
      ++k;
      digit_before = false;
      continue;
    }
    if (s[k] == '.') {
      if (seen_point || seen_exp) return std::nullopt;
      seen_point = true;
      digit_before = false;
      ascii += s[k++];
      continue;
    }
    if (s[k] == 'e' || s[k] == 'E') {
      if (seen_exp || !seen_digit) return std::nullopt;
      seen_exp = true;
      digit_before = false;
      ascii += 'e';
      ++k;
      if (k < s.size() && (s[k] == '+' || s[k] == '-')) ascii += s[k++];
      continue;
    }
    const uint32_t cp = next_code_point(s, k);
    const int d = digit_value(cp);
    if (d < 0 || d > 9) return std::nullopt;
    ascii += char('0' + d);
    digit_before = true;
    seen_digit = true;
    exp_digit = exp_digit || seen_exp;
  }
  if (!seen_digit || (seen_exp && !exp_digit)) return std::nullopt;
  return std::strtod(ascii.c_str(), nullptr);  // correctly rounded; out of range gives inf or 0
}

Value round_number(const Value& v, int64_t ndigits) {
  if (!is_float(v)) {  // int.__round__: exact, an int
    if (ndigits >= 0) return Value::integer(v.as_mpz());
    mpz_class scale;
    mpz_ui_pow_ui(scale.get_mpz_t(), 10, static_cast<unsigned long>(std::min<int64_t>(-ndigits, 100000)));
    const mpz_class x = v.as_mpz();
    mpz_class q, r;
    mpz_fdiv_qr(q.get_mpz_t(), r.get_mpz_t(), x.get_mpz_t(), scale.get_mpz_t());
    const int c = cmp(mpz_class(2 * r), scale);
    if (c > 0 || (c == 0 && mpz_odd_p(q.get_mpz_t()))) ++q;
    return Value::integer(mpz_class(q * scale));
  }
  const double x = v.f;
  // CPython's float.__round__: non-finite values and very many digits are x itself, very few
  // are a signed zero.
  if (!std::isfinite(x) || ndigits > 323) return v;
  if (ndigits < -308) return Value::number(std::copysign(0.0, x));
  mpz_class scale;
  mpz_ui_pow_ui(scale.get_mpz_t(), 10, static_cast<unsigned long>(std::llabs(ndigits)));
  mpq_class q = exact(x);
  if (ndigits >= 0)
    q *= scale;
  else
    q /= scale;
  // Round the exact rational half to even.
  mpz_class n, r;
  mpz_fdiv_qr(n.get_mpz_t(), r.get_mpz_t(), q.get_num_mpz_t(), q.get_den_mpz_t());
  const int c = cmp(mpz_class(2 * r), q.get_den());
  if (c > 0 || (c == 0 && mpz_odd_p(n.get_mpz_t()))) ++n;
  const auto out = ndigits >= 0 ? rational_to_double(n, scale)
                                : rational_to_double(mpz_class(n * scale), 1);
  if (!out) throw PyError{"rounded value too large to represent"};
  return Value::number(*out == 0 ? std::copysign(0.0, x) : *out);
}

}  // namespace gemmax::jinja
