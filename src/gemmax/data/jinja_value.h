// The values a Jinja template computes with, with Python's semantics where templates can see
// them (str() of None/True/lists, truthiness, == across int and float, len in code points).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace gemmax::jinja {

struct Value;
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
  int64_t i = 0;
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
  double as_double() const { return kind == Kind::Float ? f : double(kind == Kind::Bool ? b : i); }
  const Value* find(const std::string& key) const;  // Dict/Namespace entry, or null
  Value* find(const std::string& key);
};

const char* type_name(const Value& v);  // Python's name: 'str', 'int', 'list', 'dict', ...
bool truthy(const Value& v);
bool equal(const Value& a, const Value& b);
std::string to_str(const Value& v);  // Python's str()
std::string repr(const Value& v);    // Python's repr()
// json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=sort_keys), as transformers'
// tojson filter calls it; indent < 0: none.
std::string to_json(const Value& v, int indent = -1, bool sort_keys = false);
// Code points of UTF-8 text (invalid bytes count as one each).
std::vector<std::string> code_points(const std::string& s);

}  // namespace gemmax::jinja
