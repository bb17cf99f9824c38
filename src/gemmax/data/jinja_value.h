// The values a Jinja template computes with, with Python's semantics where templates can see
// them (str() of None/True/lists, truthiness, == across int and float, len in code points).
#pragma once

#include <gmpxx.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace gemmax::jinja {

struct Value;

// What one render has spent, against its limits: the bytes of the strings and lists it made
// (a running total: a copy counts again) and its steps (statements and expressions evaluated,
// elements made or visited, and one per kBytesPerStep bytes copied or scanned, so that O(n)
// string work is paid for as it is done). Value's factories and the functions below charge
// the render running on this thread; with none running they charge nothing.
struct Budget {
  int64_t max_bytes = 0, bytes = 0;
  int64_t max_steps = 0, steps = 0;
};
struct BudgetExceeded {};  // the bytes
struct StepsExceeded {};
struct StringTooLong {};  // beyond kMaxString
// The longest string a render may build by growing one (concatenation, repetition, join,
// replace, str() or tojson of a container). Fixed rather than an option: a chat turn this long
// is millions of tokens, beyond any sequence a model trains on, so only a runaway template
// builds one.
constexpr size_t kMaxString = size_t(1) << 24;
// Copying or scanning this many bytes costs about what evaluating an expression does.
constexpr int64_t kBytesPerStep = 64;
// Throws BudgetExceeded if making `bytes` more would spend the running budget: checked before
// a large copy, so that the copy itself cannot exhaust the machine.
void check_budget(size_t bytes);
// Before a string of `bytes` is grown: throws StringTooLong beyond kMaxString, then as
// check_budget.
void check_string(size_t bytes);
void spend_steps(int64_t n);  // throws StepsExceeded once the running render's steps are spent
inline void scan(size_t bytes) { spend_steps(int64_t(bytes / kBytesPerStep)); }
class BudgetScope {  // makes `b` the budget of this thread's render while it lives
 public:
  explicit BudgetScope(Budget& b);
  ~BudgetScope();

 private:
  Budget* previous_;
};

// What Python would raise (TypeError, ValueError, OverflowError, ...), with its message; the
// renderer reports it at the expression's line:column.
struct PyError {
  std::string message;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
};
using Function = std::function<Value(CallArgs&)>;
using Items = std::vector<std::pair<std::string, Value>>;  // a dict in insertion order

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Function };
  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;                       // Int within 64 bits
  std::shared_ptr<const mpz_class> big;  // Int beyond 64 bits (Python's ints have no bound)
  double f = 0;
  std::string s;                             // String; Undefined: the name that was missing
  std::shared_ptr<std::vector<Value>> list;  // List (a tuple when `tuple`)
  std::shared_ptr<Items> dict;               // Dict and Namespace (a namespace is mutable)
  std::shared_ptr<Function> fn;
  bool tuple = false;

  Value() = default;
  static Value undefined(std::string name = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value integer(const mpz_class& v);
  static Value number(double v);
  static Value string(std::string v);
  static Value make_list(std::vector<Value> v, bool tuple = false);
  static Value make_dict(Items items = {});
  static Value make_namespace(Items items = {});
  static Value function(Function f);
  static Value from_json(const nlohmann::ordered_json& j);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_string() const { return kind == Kind::String; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_mapping() const { return kind == Kind::Dict; }
  bool is_int() const { return kind == Kind::Int || kind == Kind::Bool; }  // Python's int or bool
  mpz_class as_mpz() const;  // an Int or Bool
  double as_double() const;  // float(v): Python's OverflowError as a PyError
  const Value* find(const std::string& key) const;  // Dict/Namespace entry, or null
  Value* find(const std::string& key);
};

const char* type_name(const Value& v);  // Python's name: 'str', 'int', 'list', 'dict', ...
bool truthy(const Value& v);
bool equal(const Value& a, const Value& b);
std::string to_str(const Value& v);  // Python's str()
std::string repr(const Value& v);    // Python's repr()
// json.dumps's arguments, as transformers' tojson filter takes them (its default: ensure_ascii
// false); `indent` absent: one line.
struct JsonStyle {
  bool ensure_ascii = false;
  std::optional<std::string> indent;
  std::string item_separator = ", ", key_separator = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonStyle& style = {});
// Code points of UTF-8 text (invalid bytes count as one each).
std::vector<std::string> code_points(const std::string& s);
// The byte length of the code point that starts at s[at], as code_points splits s (an invalid
// byte alone), and their number in s, without making them.
size_t code_point_size(const std::string& s, size_t at);
size_t count_code_points(const std::string& s);
// Python's str.isspace() for one code point given as its UTF-8 bytes: the whitespace that
// strip(), split() and trim remove, Unicode's (U+00A0, U+2028, U+3000, ...) and not only ASCII's.
bool is_py_space(const std::string& code_point);
// The byte length of the whitespace code point that starts at s[at] (ends before s[end]); 0 if
// none.
size_t py_space_at(const std::string& s, size_t at);
// The code point of UTF-8 text at s[at] (advancing `at`); an invalid byte is itself, as a
// code point of its value, one byte long.
uint32_t next_code_point(const std::string& s, size_t& at);
// Python's str.isprintable() of one code point (repr() escapes the others) and its regex \w
// (what Jinja's wordcount counts runs of), from ICU's general categories.
bool py_printable(uint32_t cp);
bool py_word_char(uint32_t cp);
size_t py_space_before(const std::string& s, size_t end);

}  // namespace gemmax::jinja
