// Evaluation of a parsed template: Python's semantics for values, Jinja's for scopes (a for
// loop's body is a fresh scope per iteration; macros see the template's top level at call time).
#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "gemmax/base/error.h"
#include "gemmax/data/jinja.h"
#include "gemmax/data/jinja_ast.h"
#include "gemmax/data/jinja_number.h"

namespace gemmax::jinja {
namespace {

// Bounds that keep a hostile template from exhausting memory or time (templates are code that
// comes with model folders); real chat templates stay far below them. The bytes, the steps
// and the longest string are in jinja_value.h.
constexpr int kMaxDepth = 200;            // nested macro calls
constexpr ptrdiff_t kMaxStack = 2 << 20;  // bytes of stack for nested evaluations

const std::set<std::string> kFilters = {
    "abs",    "capitalize", "count",  "d",          "default", "dictsort", "e",      "escape",
    "first",  "float",      "int",    "items",      "join",    "last",     "length", "list",
    "lower",  "map",        "reject", "rejectattr", "replace", "reverse",  "round",  "safe",
    "select", "selectattr", "string", "sum",        "title",   "tojson",   "trim",   "unique",
    "upper",  "min",        "max",    "wordcount"};
const std::set<std::string> kTests = {
    "boolean", "callable", "defined", "divisibleby", "eq",   "equalto",   "escaped", "even",
    "false",   "filter",   "float",   "ge",          "gt",   "in",        "integer", "iterable",
    "le",      "lower",    "lt",      "mapping",     "ne",   "none",      "number",  "odd",
    "sameas",  "sequence", "string",  "test",        "true", "undefined", "upper"};

enum class Flow { Normal, Break, Continue };

struct Scope {
  std::unordered_map<std::string, Value> vars;
  Scope* parent = nullptr;
  Value* lookup(const std::string& n) {
    int64_t levels = 0;  // blocks nest 500 deep: a name looked up through them costs more
    for (Scope* s = this; s; s = s->parent, ++levels) {
      auto it = s->vars.find(n);
      if (it != s->vars.end()) {
        spend_steps(levels / 8);
        return &it->second;
      }
    }
    spend_steps(levels / 8);
    return nullptr;
  }
};

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// The byte offset of the code point `index` code points after byte `at` of `s` (its end if
// there are fewer).
size_t code_point_offset(const std::string& s, int64_t index, size_t at = 0) {
  for (; index > 0 && at < s.size(); --index) at += code_point_size(s, at);
  return at;
}

// s.find(needle, from) in time linear in s: std::string::find compares the needle at every
// place its first byte occurs, which a hostile template makes every byte of megabytes.
size_t find_text(const std::string& s, const std::string& needle, size_t from) {
  if (needle.size() <= 8 || from >= s.size()) return s.find(needle, from);
  const auto it = std::search(s.begin() + std::ptrdiff_t(from), s.end(),
                              std::boyer_moore_searcher(needle.begin(), needle.end()));
  return it == s.end() ? std::string::npos : size_t(it - s.begin());
}

// str.strip/lstrip/rstrip: `chars` is a set of code points; without it, Python's whitespace.
// By byte offsets, from the left (an invalid byte is a code point of its own, as code_points
// splits), without a std::string per code point.
std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  const bool by_chars = chars && !chars->is_undefined() && chars->kind != Value::Kind::None;
  // A code point's bytes (at most 4) and length as one key.
  auto key = [](const std::string& t, size_t at, size_t n) {
    uint64_t k = n;
    for (size_t j = 0; j < n; ++j) k = k << 8 | static_cast<unsigned char>(t[at + j]);
    return k;
  };
  std::unordered_set<uint64_t> set;
  if (by_chars)
    for (size_t k = 0; k < chars->s.size(); k += code_point_size(chars->s, k))
      set.insert(key(chars->s, k, code_point_size(chars->s, k)));
  auto drop = [&](size_t at) {
    const size_t n = code_point_size(s, at);
    return by_chars ? set.count(key(s, at, n)) > 0 : is_py_space(s.substr(at, n));
  };
  size_t b = 0;
  if (left)
    while (b < s.size() && drop(b)) b += code_point_size(s, b);
  size_t e = right ? b : s.size();
  if (right)  // the end of the last code point kept
    for (size_t k = b; k < s.size(); k += code_point_size(s, k))
      if (!drop(k)) e = k + code_point_size(s, k);
  return s.substr(b, e - b);
}

// str.split() without a separator: runs of Python's whitespace, at most `max` splits.
std::vector<Value> split_whitespace(const std::string& s, int64_t max) {
  auto space = [&](size_t at) { return is_py_space(s.substr(at, code_point_size(s, at))); };
  std::vector<Value> out;
  size_t k = 0;
  while (k < s.size()) {
    while (k < s.size() && space(k)) k += code_point_size(s, k);
    if (k >= s.size()) break;
    check_budget(sizeof(Value) * (out.size() + 1));  // the list itself, before it grows
    const size_t begin = k;
    if (max >= 0 && int64_t(out.size()) == max) {  // the rest as it is, as Python keeps it
      out.push_back(Value::string(s.substr(begin)));
      break;
    }
    while (k < s.size() && !space(k)) k += code_point_size(s, k);
    out.push_back(Value::string(s.substr(begin, k - begin)));
  }
  return out;
}

class Renderer {
 public:
  Renderer(const std::string& name, const Body& body, const Limits& limits, RenderTrace* trace)
      : name_(name), body_(body), limits_(limits), trace_(trace) {
    budget_.max_bytes = limits.max_bytes;
    budget_.max_steps = limits.max_steps;
  }
  // A namespace is the one value a template can change after it is made, so the one that can
  // hold itself ({% set ns.self = ns %}, or through a list or the loop object): emptied once
  // the render is over, so that such a cycle is freed.
  ~Renderer() {
    for (const std::weak_ptr<Items>& w : namespaces_)
      if (std::shared_ptr<Items> ns = w.lock()) ns->clear();
  }

  std::string run(const nlohmann::ordered_json& context) {
    stack_base_ = static_cast<const char*>(__builtin_frame_address(0));
    BudgetScope scope(budget_);
    Scope global;
    if (!context.is_object()) fail(name_, ": the template's context must be a JSON object");
    try {
      for (const auto& [k, v] : context.items()) global.vars[k] = Value::from_json(v);
    } catch (const BudgetExceeded&) {
      budget_error(Loc{});
    } catch (const StepsExceeded&) {
      steps_error(Loc{});
    }
    add_globals(global);
    if (trace_) watch_messages(global);
    std::string out;
    top_ = &out;
    try {
      render(body_, global, out);
    } catch (const PyError& p) {  // raised where no expression's place is known
      fail(name_, ": ", p.message);
    }
    return out;
  }

 private:
  [[noreturn]] void error(Loc at, const std::string& what) const {
    fail(name_, ":", at.line, ":", at.column, ": ", what);
  }
  [[noreturn]] void budget_error(Loc at) const {
    error(at, "the template made more than " + std::to_string(limits_.max_bytes >> 20) +
                  " MiB of strings and lists (a loop that doubles a list or a string?); raise "
                  "the limit with " +
                  limits_.bytes_option + " if the template is trusted");
  }
  [[noreturn]] void steps_error(Loc at) const {
    error(at, "the template runs too long (over " + std::to_string(limits_.max_steps) +
                  " steps: statements and expressions evaluated, elements made and each " +
                  std::to_string(kBytesPerStep) +
                  " bytes of strings copied or scanned); raise the limit with " +
                  limits_.steps_option + " if the template is trusted");
  }
  [[noreturn]] void string_error(Loc at) const {
    error(at, "the template builds a string longer than " + std::to_string(kMaxString >> 20) +
                  " MiB, the most one render may build (a bound no option raises: a chat turn "
                  "this long is millions of tokens, beyond any sequence a model trains on)");
  }

  // A message read while an earlier one's iteration writes output: that iteration's text
  // depends on what follows it (Gemma 4 writes a call's tool responses in the call's turn).
  const Value& read(const Value& v) {
    if (current_message_ != std::string::npos && v.kind == Value::Kind::Dict &&
        lookahead_at_ == std::string::npos) {
      auto it = watched_.find(v.dict.get());
      if (it != watched_.end() && it->second > current_message_) lookahead_at_ = top_->size();
    }
    return v;
  }

  // The identity of each message dict, so that a loop over `messages` (or a slice or filter
  // of it) is seen whatever the template calls it.
  void watch_messages(Scope& global) {
    const Value* m = global.lookup("messages");
    const size_t n = m && m->kind == Value::Kind::List ? m->list->size() : 0;
    trace_->message_output.assign(n, {std::string::npos, std::string::npos});
    trace_->repeated.assign(n, false);
    trace_->reads_later.assign(n, false);
    trace_->lookahead_output.assign(n, std::string::npos);
    trace_->generation.clear();
    trace_->generation_elsewhere = false;
    for (size_t k = 0; k < n; ++k)
      if ((*m->list)[k].kind == Value::Kind::Dict) watched_[(*m->list)[k].dict.get()] = k;
  }

  void add_globals(Scope& g) {
    global_ = &g;
    g.vars["raise_exception"] = Value::function([](CallArgs& a) -> Value {
      throw RaisedError(a.positional.empty() ? std::string() : to_str(a.positional[0]));
    });
    g.vars["namespace"] = Value::function([this](CallArgs& a) -> Value {
      Items items;
      if (!a.positional.empty() && a.positional[0].is_mapping()) items = *a.positional[0].dict;
      for (auto& [k, v] : a.keywords) items.emplace_back(k, v);
      Value ns = Value::make_namespace(std::move(items));
      namespaces_.push_back(ns.dict);
      return ns;
    });
    g.vars["range"] = Value::function([](CallArgs& a) -> Value {
      int64_t start = 0, stop = 0, step = 1;
      std::vector<int64_t> n;
      for (const Value& v : a.positional) {
        if (!v.is_int())
          throw CallError("range() takes integers, got " + std::string(type_name(v)));
        const auto k = small_int(v);
        if (!k) throw CallError("range() of an integer beyond 64 bits: too long for a template");
        n.push_back(*k);
      }
      if (n.size() == 1)
        stop = n[0];
      else if (n.size() >= 2 && n.size() <= 3) {
        start = n[0];
        stop = n[1];
        if (n.size() == 3) step = n[2];
      } else
        throw CallError("range() takes 1 to 3 integers");
      if (step == 0) throw CallError("range() step must not be zero");
      // Its length first: the list is made only if the render's bytes can hold it.
      const __int128 span = step > 0 ? __int128(stop) - start : __int128(start) - stop;
      const __int128 by = step > 0 ? __int128(step) : -__int128(step);
      const __int128 count = span <= 0 ? 0 : (span + by - 1) / by;
      check_budget(count > (__int128(1) << 40) ? size_t(1) << 62 : size_t(count) * sizeof(Value));
      std::vector<Value> out;
      out.reserve(size_t(count));
      for (__int128 k = 0; k < count; ++k) out.push_back(Value::integer(int64_t(start + k * step)));
      return Value::make_list(std::move(out));
    });
  }

  struct RaisedError {
    explicit RaisedError(std::string m) : message(std::move(m)) {}
    std::string message;
  };
  struct CallError {
    explicit CallError(std::string m) : message(std::move(m)) {}
    std::string message;
  };

  // ---- statements ----

  Flow render(const Body& body, Scope& scope, std::string& out) {
    for (const NodePtr& n : body) {
      const Flow f = render(*n, scope, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  void write(std::string& out, const std::string& s, Loc at) {
    if (int64_t(out.size() + s.size()) > limits_.max_output)
      error(at, "the template's output exceeds " + std::to_string(limits_.max_output >> 20) +
                    " MiB, the most one render may write (a bound no option raises: a "
                    "conversation this long is millions of tokens, beyond any sequence a model "
                    "trains on)");
    scan(s.size());
    out += s;
  }

  void step(Loc at) {
    if (++budget_.steps > budget_.max_steps) steps_error(at);
  }

  Flow render(const Node& n, Scope& scope, std::string& out) {
    step(n.loc);
    try {
      return render_unchecked(n, scope, out);
    } catch (const BudgetExceeded&) {  // the bounds of what the statement made itself
      budget_error(n.loc);
    } catch (const StepsExceeded&) {
      steps_error(n.loc);
    } catch (const StringTooLong&) {
      string_error(n.loc);
    }
  }

  Flow render_unchecked(const Node& n, Scope& scope, std::string& out) {
    switch (n.kind) {
      case Node::Kind::Text:
        write(out, n.text, n.loc);
        return Flow::Normal;
      case Node::Kind::Output:
        try {
          write(out, to_str(eval(*n.expr, scope)), n.loc);
        } catch (const PyError& p) {  // str() of the value raised (an int of over 4300 digits)
          error(n.loc, p.message);
        }
        return Flow::Normal;
      case Node::Kind::If:
        for (const auto& [cond, body] : n.branches)
          if (!cond || truthy(eval(*cond, scope))) return render(body, scope, out);
        return Flow::Normal;
      case Node::Kind::For:
        return render_for(n, scope, out);
      case Node::Kind::Set: {
        Value v = eval(*n.expr, scope);
        if (!n.attribute.empty()) {
          Value* ns = scope.lookup(n.targets[0]);
          if (!ns || ns->kind != Value::Kind::Namespace)
            error(n.loc, "'set " + n.targets[0] + "." + n.attribute +
                             "': only a namespace() object's attributes can be assigned");
          if (Value* slot = ns->find(n.attribute))
            *slot = std::move(v);
          else
            ns->dict->emplace_back(n.attribute, std::move(v));
        } else {
          assign(n.targets, std::move(v), scope, n.loc);
        }
        return Flow::Normal;
      }
      case Node::Kind::SetBlock: {
        std::string text;
        render(n.body, scope, text);
        scope.vars[n.targets[0]] = Value::string(std::move(text));
        return Flow::Normal;
      }
      case Node::Kind::Macro:
        scope.vars[n.targets[0]] = make_macro(n);
        return Flow::Normal;
      case Node::Kind::Generation: {
        const size_t begin = out.size();
        const Flow f = render(n.body, scope, out);
        if (trace_ && &out == top_)
          trace_->generation.emplace_back(begin, out.size());
        else if (trace_)
          trace_->generation_elsewhere = true;
        return f;
      }
      case Node::Kind::Break:
        return Flow::Break;
      case Node::Kind::Continue:
        return Flow::Continue;
    }
    return Flow::Normal;
  }

  void assign(const std::vector<std::string>& targets, Value v, Scope& scope, Loc at) {
    if (targets.size() == 1) {
      scope.vars[targets[0]] = std::move(v);
      return;
    }
    std::vector<Value> items = iterate(v, at);
    if (items.size() != targets.size())
      error(at, "cannot unpack " + std::to_string(items.size()) + " values into " +
                    std::to_string(targets.size()) + " names");
    for (size_t k = 0; k < targets.size(); ++k) scope.vars[targets[k]] = std::move(items[k]);
  }

  Flow render_for(const Node& n, Scope& scope, std::string& out) {
    std::vector<Value> items = iterate(eval(*n.expr, scope), n.expr->loc);
    if (n.filter) {
      std::vector<Value> kept;
      for (Value& item : items) {
        Scope s{{}, &scope};
        assign(n.targets, item, s, n.loc);
        if (truthy(eval(*n.filter, s))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return render(n.else_body, scope, out);
    const int64_t len = int64_t(items.size());
    // Jinja's loop object: one for the loop, advanced in place (a template that keeps it sees
    // it move on, as in Jinja), so an iteration makes no dict.
    auto at = std::make_shared<int64_t>(0);
    Value loop = Value::make_dict({{"index", {}},
                                   {"index0", {}},
                                   {"revindex", {}},
                                   {"revindex0", {}},
                                   {"first", {}},
                                   {"last", {}},
                                   {"length", Value::integer(len)},
                                   {"depth", Value::integer(1)},
                                   {"depth0", Value::integer(0)},
                                   {"previtem", {}},
                                   {"nextitem", {}},
                                   {"cycle", Value::function([at](CallArgs& a) -> Value {
                                      if (a.positional.empty())
                                        throw CallError("loop.cycle() needs at least one value");
                                      return a.positional[size_t(*at) % a.positional.size()];
                                    })}});
    Items& fields = *loop.dict;
    for (int64_t k = 0; k < len; ++k) {
      step(n.loc);
      Scope s{{}, &scope};
      assign(n.targets, items[size_t(k)], s, n.loc);
      *at = k;
      fields[0].second = Value::integer(k + 1);
      fields[1].second = Value::integer(k);
      fields[2].second = Value::integer(len - k);
      fields[3].second = Value::integer(len - k - 1);
      fields[4].second = Value::boolean(k == 0);
      fields[5].second = Value::boolean(k == len - 1);
      fields[9].second = k > 0 ? items[size_t(k - 1)] : Value::undefined("loop.previtem");
      fields[10].second = k + 1 < len ? items[size_t(k + 1)] : Value::undefined("loop.nextitem");
      scan(items[size_t(k)].s.size() + fields[9].second.s.size() + fields[10].second.s.size());
      s.vars["loop"] = loop;
      const Items* item =
          items[size_t(k)].kind == Value::Kind::Dict ? items[size_t(k)].dict.get() : nullptr;
      auto watched = item && &out == top_ && current_message_ == std::string::npos
                         ? watched_.find(item)
                         : watched_.end();
      const size_t begin = out.size();
      if (watched != watched_.end()) {
        current_message_ = watched->second;
        lookahead_at_ = std::string::npos;
      }
      const Flow f = render(n.body, s, out);
      if (watched != watched_.end()) {
        const size_t m = current_message_;
        current_message_ = std::string::npos;
        if (out.size() > begin) {
          auto& range = trace_->message_output[m];
          if (range.first != std::string::npos) trace_->repeated[m] = true;
          range = {begin, out.size()};
          if (lookahead_at_ != std::string::npos && out.size() > lookahead_at_) {
            trace_->reads_later[m] = true;
            trace_->lookahead_output[m] = lookahead_at_;
          }
        }
      }
      if (f == Flow::Break) break;
    }
    return Flow::Normal;
  }

  Value make_macro(const Node& n) {
    const Node* node = &n;
    return Value::function([this, node](CallArgs& a) -> Value {
      if (++depth_ > kMaxDepth) throw CallError("macros nested deeper than 200 calls");
      Scope s{{}, global_};
      if (a.positional.size() > node->params.size())
        throw CallError("macro '" + node->targets[0] + "' takes " +
                        std::to_string(node->params.size()) + " arguments, got " +
                        std::to_string(a.positional.size()));
      for (size_t k = 0; k < node->params.size(); ++k) {
        const auto& [pname, def] = node->params[k];
        if (k < a.positional.size())
          s.vars[pname] = a.positional[k];
        else if (def)
          s.vars[pname] = eval(*def, s);
        else
          s.vars[pname] = Value::undefined(pname);
      }
      for (auto& kw : a.keywords) {
        const bool known = std::any_of(node->params.begin(), node->params.end(),
                                       [&](const auto& p) { return p.first == kw.first; });
        if (!known)
          throw CallError("macro '" + node->targets[0] + "' has no parameter '" + kw.first + "'");
        s.vars[kw.first] = kw.second;
      }
      std::string text;
      render(node->body, s, text);
      --depth_;
      return Value::string(std::move(text));
    });
  }

  // ---- expressions ----

  // The items of `v`, copied: a step for each, and its strings' bytes scanned.
  std::vector<Value> iterate(const Value& v, Loc at) const {
    switch (v.kind) {
      case Value::Kind::Undefined:
        return {};
      case Value::Kind::List: {
        size_t bytes = 0;
        for (const Value& e : *v.list) bytes += e.s.size();
        spend_steps(int64_t(v.list->size()));
        scan(bytes);
        return *v.list;
      }
      case Value::Kind::Dict: {
        std::vector<Value> keys;
        for (const auto& e : *v.dict) keys.push_back(Value::string(e.first));
        return keys;
      }
      case Value::Kind::String: {
        const size_t n = count_code_points(v.s);
        check_budget(n * sizeof(Value));
        spend_steps(int64_t(n));
        std::vector<Value> out;
        out.reserve(n);
        for (size_t k = 0; k < v.s.size(); k += code_point_size(v.s, k))
          out.push_back(Value::string(v.s.substr(k, code_point_size(v.s, k))));
        return out;
      }
      default:
        error(at, std::string("'") + type_name(v) + "' object is not iterable");
    }
  }

  int64_t length(const Value& v, Loc at) const {
    switch (v.kind) {
      case Value::Kind::Undefined:
        return 0;
      case Value::Kind::String:
        return int64_t(count_code_points(v.s));
      case Value::Kind::List:
        return int64_t(v.list->size());
      case Value::Kind::Dict:
        return int64_t(v.dict->size());
      default:
        error(at, std::string("object of type '") + type_name(v) + "' has no len()");
    }
  }

  Value eval(const Expr& e, Scope& scope) {
    step(e.loc);
    // Recursive macros over deep expressions nest evaluations beyond either bound alone; the
    // stack they use is measured, so the bound holds whatever a frame costs in this build.
    const char* here = static_cast<const char*>(__builtin_frame_address(0));
    if (stack_base_ - here > kMaxStack)
      error(e.loc, "the template evaluates expressions nested too deeply (over " +
                       std::to_string(kMaxStack >> 20) +
                       " MiB of stack, through recursive macros)");
    try {
      Value v = eval_unchecked(e, scope);
      scan(v.s.size());  // a string value is copied as it is passed on (a name's, an item's)
      return v;
    } catch (const CallError& c) {
      error(e.loc, c.message);
    } catch (const PyError& p) {
      error(e.loc, p.message);
    } catch (const RaisedError& r) {
      error(e.loc, "the template raised an exception: " + r.message);
    } catch (const BudgetExceeded&) {
      budget_error(e.loc);
    } catch (const StepsExceeded&) {
      steps_error(e.loc);
    } catch (const StringTooLong&) {
      string_error(e.loc);
    } catch (const std::bad_alloc&) {
      error(e.loc, "out of memory while rendering; lower " + limits_.bytes_option +
                       " below what this machine can hold");
    }
  }

  [[noreturn]] void undefined_error(const Value& v, Loc at, const std::string& what) const {
    error(at, (v.s.empty() ? std::string("a value") : "'" + v.s + "'") + " is undefined" + what);
  }

  Value eval_unchecked(const Expr& e, Scope& scope) {
    switch (e.kind) {
      case Expr::Kind::Literal:
        return e.value;
      case Expr::Kind::Name: {
        if (Value* v = scope.lookup(e.name)) return *v;
        return Value::undefined(e.name);
      }
      case Expr::Kind::GetAttr:
        return get_attr(read(eval(*e.args[0], scope)), e.name, e.loc);
      case Expr::Kind::GetItem:
        return get_item(read(eval(*e.args[0], scope)), eval(*e.args[1], scope), e.loc);
      case Expr::Kind::Slice: {
        Value obj = eval(*e.args[0], scope);
        Value b[3];
        for (int k = 0; k < 3; ++k)
          if (e.args[size_t(k) + 1]) b[k] = eval(*e.args[size_t(k) + 1], scope);
        return slice(obj, b, e.loc);
      }
      case Expr::Kind::Call: {
        Value callee = eval(*e.args[0], scope);
        CallArgs a = args(e, scope);
        if (callee.kind != Value::Kind::Function) {
          if (callee.is_undefined()) undefined_error(callee, e.loc, ": it cannot be called");
          error(e.loc, std::string("'") + type_name(callee) + "' object is not callable");
        }
        return (*callee.fn)(a);
      }
      case Expr::Kind::Filter: {
        Value v = read(eval(*e.args[0], scope));
        CallArgs a = args(e, scope);
        return filter(e.name, std::move(v), a, e.loc);
      }
      case Expr::Kind::Test: {
        Value v = eval(*e.args[0], scope);
        CallArgs a = args(e, scope);
        return Value::boolean(test(e.name, v, a, e.loc) != e.negated);
      }
      case Expr::Kind::Unary: {
        Value v = eval(*e.args[0], scope);
        if (e.name == "not") return Value::boolean(!truthy(v));
        if (!v.is_number())
          error(e.loc, "bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
        if (e.name == "+") return v.kind == Value::Kind::Bool ? Value::integer(v.b) : v;
        return negate(v);
      }
      case Expr::Kind::Binary: {
        if (e.name == "and") {
          Value a = eval(*e.args[0], scope);
          return truthy(a) ? eval(*e.args[1], scope) : a;
        }
        if (e.name == "or") {
          Value a = eval(*e.args[0], scope);
          return truthy(a) ? a : eval(*e.args[1], scope);
        }
        return binary(e.name, eval(*e.args[0], scope), eval(*e.args[1], scope), e.loc);
      }
      case Expr::Kind::Cond:
        if (truthy(eval(*e.args[1], scope))) return eval(*e.args[0], scope);
        return e.args[2] ? eval(*e.args[2], scope) : Value::undefined();
      case Expr::Kind::List:
      case Expr::Kind::Tuple: {
        std::vector<Value> items;
        for (const ExprPtr& a : e.args) items.push_back(eval(*a, scope));
        return Value::make_list(std::move(items), e.kind == Expr::Kind::Tuple);
      }
      case Expr::Kind::Dict: {
        Value d = Value::make_dict();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key = eval(*e.args[k], scope);
          if (!key.is_string())
            error(e.args[k]->loc, "gemmax's templates support only string dict keys");
          Value v = eval(*e.args[k + 1], scope);
          if (Value* slot = d.find(key.s))
            *slot = std::move(v);
          else
            d.dict->emplace_back(key.s, std::move(v));
        }
        return d;
      }
    }
    return {};
  }

  CallArgs args(const Expr& e, Scope& scope) {
    CallArgs a;
    for (size_t k = 1; k < e.args.size(); ++k) a.positional.push_back(eval(*e.args[k], scope));
    for (const auto& [key, x] : e.keywords) a.keywords.emplace_back(key, eval(*x, scope));
    return a;
  }

  // Python's normalisation of an index against a length.
  static int64_t index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

  Value get_item(const Value& obj, const Value& key, Loc at) {
    switch (obj.kind) {
      case Value::Kind::Undefined:
        undefined_error(obj, at, ": it has no items");
      case Value::Kind::Dict:
      case Value::Kind::Namespace:
        if (key.is_string()) {
          if (const Value* v = obj.find(key.s)) return *v;
          if (obj.kind == Value::Kind::Dict) {
            Value m = method(obj, key.s);
            if (!m.is_undefined()) return m;
          }
        }
        return Value::undefined(key.is_string() ? key.s : repr(key));
      case Value::Kind::List:
      case Value::Kind::String: {
        if (key.kind == Value::Kind::String) return get_attr(obj, key.s, at);
        if (!key.is_int())
          error(at,
                std::string(type_name(obj)) + " indices must be integers, got " + type_name(key));
        const auto k = small_int(key);
        if (!k) return Value::undefined(repr(key));  // beyond any length
        if (obj.kind == Value::Kind::List) {
          const int64_t n = int64_t(obj.list->size()), i = index(*k, n);
          if (i < 0 || i >= n) return Value::undefined(repr(key));
          return (*obj.list)[size_t(i)];
        }
        const int64_t n = *k < 0 ? int64_t(count_code_points(obj.s)) : INT64_MAX;
        const int64_t i = index(*k, n);
        const size_t at = i < 0 ? obj.s.size() : code_point_offset(obj.s, i);
        if (at >= obj.s.size()) return Value::undefined(repr(key));
        return Value::string(obj.s.substr(at, code_point_size(obj.s, at)));
      }
      default:
        if (key.is_string()) return get_attr(obj, key.s, at);
        return Value::undefined(repr(key));
    }
  }

  Value get_attr(const Value& obj, const std::string& name, Loc at) {
    if (obj.is_undefined()) undefined_error(obj, at, ": it has no attribute '" + name + "'");
    Value m = method(obj, name);
    if (!m.is_undefined()) return m;
    if (obj.kind == Value::Kind::Dict || obj.kind == Value::Kind::Namespace)
      if (const Value* v = obj.find(name)) return *v;
    return Value::undefined(name);
  }

  Value slice(const Value& obj, const Value b[3], Loc at) {
    for (int k = 0; k < 3; ++k)
      if (!b[k].is_undefined() && b[k].kind != Value::Kind::None &&
          (b[k].kind != Value::Kind::Int || b[k].big))
        error(at,
              b[k].big ? "a slice index beyond 64 bits" : "slice indices must be integers or none");
    int64_t n;
    if (obj.kind == Value::Kind::List)
      n = int64_t(obj.list->size());
    else if (obj.kind == Value::Kind::String)
      n = int64_t(count_code_points(obj.s));
    else if (obj.is_undefined())
      undefined_error(obj, at, ": it cannot be sliced");
    else
      error(at, std::string("'") + type_name(obj) + "' object cannot be sliced");
    const int64_t step = b[2].kind == Value::Kind::Int ? b[2].i : 1;
    if (step == 0) error(at, "slice step cannot be zero");
    auto bound = [&](const Value& v, int64_t def) {
      if (v.kind != Value::Kind::Int) return def;
      int64_t i = v.i < 0 ? v.i + n : v.i;
      if (step > 0) return std::clamp<int64_t>(i, 0, n);
      return std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t start = bound(b[0], step > 0 ? 0 : n - 1), stop = bound(b[1], step > 0 ? n : -1);
    if (obj.kind == Value::Kind::String && step == 1) {  // a substring, by offsets
      const size_t from = code_point_offset(obj.s, start);
      const size_t to = start < stop ? code_point_offset(obj.s, stop - start, from) : from;
      return Value::string(obj.s.substr(from, to - from));
    }
    std::vector<size_t> offsets;  // of each code point of a string
    if (obj.kind == Value::Kind::String) {
      check_budget(size_t(n) * sizeof(size_t));
      offsets.reserve(size_t(n));
      for (size_t k = 0; k < obj.s.size(); k += code_point_size(obj.s, k)) offsets.push_back(k);
    }
    std::vector<Value> items;
    std::string s;
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
      if (obj.kind == Value::Kind::List)
        items.push_back((*obj.list)[size_t(i)]);
      else
        s.append(obj.s, offsets[size_t(i)], code_point_size(obj.s, offsets[size_t(i)]));
      if (__builtin_add_overflow(i, step, &i)) break;
    }
    if (obj.kind == Value::Kind::String) return Value::string(std::move(s));
    return Value::make_list(std::move(items), obj.tuple);
  }

  // Bound methods of str and dict (the ones chat templates call); undefined if none.
  Value method(const Value& obj, const std::string& name) {
    auto arg = [](CallArgs& a, size_t k, const char* key) -> const Value* {
      if (k < a.positional.size()) return &a.positional[k];
      for (auto& [n, v] : a.keywords)
        if (n == key) return &v;
      return nullptr;
    };
    auto str_arg = [&](CallArgs& a, size_t k, const char* what) -> std::string {
      const Value* v = arg(a, k, "");
      if (!v || !v->is_string()) throw CallError(std::string(what) + " takes a string argument");
      return v->s;
    };
    if (obj.kind == Value::Kind::String) {
      const std::string s = obj.s;
      if (name == "strip" || name == "lstrip" || name == "rstrip")
        return Value::function([s, name, arg](CallArgs& a) {
          return Value::string(strip(s, arg(a, 0, "chars"), name != "rstrip", name != "lstrip"));
        });
      if (name == "upper")
        return Value::function([s](CallArgs&) { return Value::string(upper(s)); });
      if (name == "lower")
        return Value::function([s](CallArgs&) { return Value::string(lower(s)); });
      if (name == "title" || name == "capitalize")
        return Value::function(
            [this, s, name](CallArgs& a) { return filter(name, Value::string(s), a, {}); });
      if (name == "startswith" || name == "endswith")
        return Value::function([s, name, str_arg](CallArgs& a) {
          const std::string p = str_arg(a, 0, name.c_str());
          const bool r = p.size() <= s.size() &&
                         (name == "startswith" ? s.compare(0, p.size(), p) == 0
                                               : s.compare(s.size() - p.size(), p.size(), p) == 0);
          return Value::boolean(r);
        });
      if (name == "find")
        return Value::function([s, str_arg](CallArgs& a) {
          const size_t at = find_text(s, str_arg(a, 0, "find"), 0);
          if (at == std::string::npos) return Value::integer(-1);
          return Value::integer(int64_t(count_code_points(s.substr(0, at))));
        });
      if (name == "replace")
        return Value::function(
            [this, s](CallArgs& a) { return filter("replace", Value::string(s), a, {}); });
      if (name == "join")
        return Value::function([this, s](CallArgs& a) {
          if (a.positional.empty()) throw CallError("join() takes one argument");
          std::string out;
          bool first = true;
          for (const Value& v : iterate(a.positional[0], {})) {
            if (!v.is_string())
              throw CallError("join(): sequence item is " + std::string(type_name(v)) +
                              ", expected str");
            append(out, first ? std::string() : s, v.s);
            first = false;
          }
          return Value::string(std::move(out));
        });
      if (name == "split")
        return Value::function([s, arg](CallArgs& a) {
          const Value* sep = arg(a, 0, "sep");
          const Value* maxv = arg(a, 1, "maxsplit");
          const auto small = maxv ? small_int(*maxv) : std::nullopt;
          int64_t max = small && maxv->kind == Value::Kind::Int ? *small : -1;
          std::vector<Value> out;
          if (!sep || sep->kind == Value::Kind::None) {
            out = split_whitespace(s, max);
          } else {
            if (!sep->is_string() || sep->s.empty())
              throw CallError("split(): empty or non-string separator");
            size_t k = 0;
            for (;;) {
              const size_t at = find_text(s, sep->s, k);
              if (at == std::string::npos || (max >= 0 && int64_t(out.size()) == max)) break;
              check_budget(sizeof(Value) * (out.size() + 2));  // the list itself, before it grows
              out.push_back(Value::string(s.substr(k, at - k)));
              k = at + sep->s.size();
            }
            out.push_back(Value::string(s.substr(k)));
          }
          return Value::make_list(std::move(out));
        });
    } else if (obj.kind == Value::Kind::Dict) {
      const Value d = obj;
      if (name == "get")
        return Value::function([d](CallArgs& a) {
          if (a.positional.empty()) throw CallError("get() takes a key");
          if (a.positional[0].is_string())
            if (const Value* v = d.find(a.positional[0].s)) return *v;
          return a.positional.size() > 1 ? a.positional[1] : Value::none();
        });
      if (name == "items" || name == "keys" || name == "values")
        return Value::function([d, name](CallArgs&) {
          std::vector<Value> out;
          for (const auto& [k, v] : *d.dict) {
            if (name == "items")
              out.push_back(Value::make_list({Value::string(k), v}, true));
            else
              out.push_back(name == "keys" ? Value::string(k) : v);
          }
          return Value::make_list(std::move(out));
        });
    }
    return Value::undefined(name);
  }

  static int compare(const Value& a, const Value& b, Loc at, const Renderer& r) {
    spend_steps(1);                        // sorts compare n log n times
    if (a.is_number() && b.is_number()) {  // nan: neither below nor above
      const std::partial_ordering c = compare_numbers(a, b);
      return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    if (a.is_string() && b.is_string()) return a.s < b.s ? -1 : a.s > b.s ? 1 : 0;
    if (a.kind == Value::Kind::List && b.kind == Value::Kind::List) {
      for (size_t k = 0; k < std::min(a.list->size(), b.list->size()); ++k)
        if (!equal((*a.list)[k], (*b.list)[k])) return compare((*a.list)[k], (*b.list)[k], at, r);
      return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
    }
    r.error(at, std::string("cannot compare '") + type_name(a) + "' with '" + type_name(b) + "'");
  }

  bool contains(const Value& container, const Value& item, Loc at) const {
    switch (container.kind) {
      case Value::Kind::String:
        if (!item.is_string()) error(at, "'in <string>' requires a string on the left");
        return find_text(container.s, item.s, 0) != std::string::npos;
      case Value::Kind::List:
        return std::any_of(container.list->begin(), container.list->end(),
                           [&](const Value& v) { return equal(v, item); });
      case Value::Kind::Dict:
        return item.is_string() && container.find(item.s);
      case Value::Kind::Undefined:
        undefined_error(container, at, ": 'in' needs a container");
      default:
        error(at, std::string("argument of type '") + type_name(container) + "' is not iterable");
    }
  }

  // What a copy of list `v` takes: its Values and their strings.
  static size_t list_bytes(const Value& v) {
    size_t bytes = v.list->size() * sizeof(Value);
    for (const Value& e : *v.list) bytes += e.s.size();
    return bytes;
  }
  // a + b, checked before it is built.
  static Value concat(const std::string& a, const std::string& b) {
    check_string(a.size() + b.size());
    return Value::string(a + b);
  }
  // out += sep + piece, checked before it grows: what join builds.
  static void append(std::string& out, const std::string& sep, const std::string& piece) {
    check_string(out.size() + sep.size() + piece.size());
    out += sep;
    out += piece;
  }

  Value binary(const std::string& op, const Value& a, const Value& b, Loc at) {
    if (op == "==") return Value::boolean(equal(a, b));
    if (op == "!=") return Value::boolean(!equal(a, b));
    if (op == "in") return Value::boolean(contains(read(b), a, at));
    if (op == "notin") return Value::boolean(!contains(read(b), a, at));
    if (op == "~") return concat(to_str(a), to_str(b));
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      for (const Value* v : {&a, &b})
        if (v->is_undefined()) undefined_error(*v, at, ": it cannot be compared");
      if (a.is_number() && b.is_number()) {  // exactly, and false against nan, as Python
        const std::partial_ordering c = compare_numbers(a, b);
        return Value::boolean(op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0);
      }
      const int c = compare(a, b, at, *this);
      return Value::boolean(op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0);
    }
    for (const Value* v : {&a, &b})
      if (v->is_undefined()) undefined_error(*v, at, ": it cannot be an operand of '" + op + "'");
    auto bad = [&]() {
      error(at, "unsupported operand types for " + op + ": '" + type_name(a) + "' and '" +
                    type_name(b) + "'");
    };
    if (op == "+") {
      if (a.is_string() && b.is_string()) return concat(a.s, b.s);
      if (a.kind == Value::Kind::List && b.kind == Value::Kind::List && a.tuple == b.tuple) {
        check_budget(list_bytes(a) + list_bytes(b));
        std::vector<Value> items = *a.list;
        items.insert(items.end(), b.list->begin(), b.list->end());
        return Value::make_list(std::move(items), a.tuple);
      }
    }
    if (op == "*" && (a.is_string() || a.kind == Value::Kind::List || b.is_string() ||
                      b.kind == Value::Kind::List)) {
      const Value& seq = a.is_number() ? b : a;
      const Value& times = a.is_number() ? a : b;
      if (!times.is_int()) bad();
      const auto count = small_int(times);
      if (!count) error(at, "a sequence repeated more than 2**63 times");
      const int64_t n = std::max<int64_t>(0, *count);
      // Its size first: made only if it is within the bounds.
      if (seq.is_string()) {
        if (seq.s.empty() || n == 0) return Value::string("");
        size_t size;
        if (__builtin_mul_overflow(size_t(n), seq.s.size(), &size)) size = SIZE_MAX;
        check_string(size);
        std::string out;
        out.reserve(size);
        for (int64_t k = 0; k < n; ++k) out += seq.s;
        return Value::string(std::move(out));
      }
      if (seq.kind != Value::Kind::List) bad();
      if (seq.list->empty() || n == 0) return Value::make_list({}, seq.tuple);
      size_t bytes;
      if (__builtin_mul_overflow(size_t(n), list_bytes(seq), &bytes)) bytes = SIZE_MAX;
      check_budget(bytes);
      std::vector<Value> items;
      for (int64_t k = 0; k < n; ++k) items.insert(items.end(), seq.list->begin(), seq.list->end());
      return Value::make_list(std::move(items), seq.tuple);
    }
    if (!a.is_number() || !b.is_number()) bad();
    return arithmetic(op, a, b);
  }

  // ---- filters and tests ----

  static const Value* kwarg(CallArgs& a, size_t k, const char* key) {
    if (k < a.positional.size()) return &a.positional[k];
    for (auto& [n, v] : a.keywords)
      if (n == key) return &v;
    return nullptr;
  }

  Value attribute_of(const Value& v, const std::string& path, Loc at) {
    Value cur = v;
    size_t b = 0;
    for (;;) {
      const size_t e = path.find('.', b);
      const std::string part = path.substr(b, e == std::string::npos ? e : e - b);
      if (cur.is_undefined()) return cur;
      spend_steps(1);  // a namespace can hold itself: a path may be as long as it is written
      if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit))
        cur = get_item(cur, Value::integer(std::stoll(part)), at);
      else
        cur = get_item(cur, Value::string(part), at);
      if (e == std::string::npos) return cur;
      b = e + 1;
    }
  }

  // str.replace(old, new[, count]) and Jinja's replace filter. The result's size is counted
  // before it is built: a short text times a long replacement is gigabytes.
  Value replace(const std::string& s, CallArgs& a) {
    const Value* from = kwarg(a, 0, "old");
    const Value* to = kwarg(a, 1, "new");
    const Value* count = kwarg(a, 2, "count");
    if (!from || !to) throw CallError("replace() takes the old and new strings");
    const std::string f = to_str(*from), t = to_str(*to);
    const auto small = count ? small_int(*count) : std::nullopt;
    const int64_t most = small && count->kind == Value::Kind::Int && *small >= 0 ? *small : -1;
    // The places it replaces: before each code point and at the end for an empty `old`.
    std::vector<size_t> places;
    for (size_t k = 0; most < 0 || int64_t(places.size()) < most;) {
      const size_t at = f.empty() ? k : find_text(s, f, k);
      if (at == std::string::npos || at > s.size()) break;
      check_budget(sizeof(size_t) * (places.size() + 1));
      places.push_back(at);
      k = f.empty() ? (at < s.size() ? at + code_point_size(s, at) : s.size() + 1) : at + f.size();
    }
    spend_steps(int64_t(places.size()));
    size_t size = 0;
    const bool grows = t.size() > f.size();
    if (__builtin_mul_overflow(places.size(), grows ? t.size() - f.size() : 0, &size) ||
        __builtin_add_overflow(size, s.size(), &size))
      size = SIZE_MAX;
    if (grows) check_string(size);
    std::string out;
    out.reserve(grows ? size : s.size());
    size_t k = 0;
    for (const size_t at : places) {
      out.append(s, k, at - k);
      out += t;
      k = at + f.size();
    }
    if (k < s.size()) out.append(s, k);
    return Value::string(std::move(out));
  }

  Value filter(const std::string& name, Value v, CallArgs& a, Loc at) {
    if (name == "default" || name == "d") {
      const Value* boolean = kwarg(a, 1, "boolean");
      const bool use_default = v.is_undefined() || (boolean && truthy(*boolean) && !truthy(v));
      if (!use_default) return v;
      const Value* def = kwarg(a, 0, "default_value");
      return def ? *def : Value::string("");
    }
    if (name == "safe") return v;
    if (name == "trim") return Value::string(strip(to_str(v), kwarg(a, 0, "chars"), true, true));
    if (name == "length" || name == "count") return Value::integer(length(v, at));
    if (name == "upper") return Value::string(upper(to_str(v)));
    if (name == "lower") return Value::string(lower(to_str(v)));
    if (name == "string") return Value::string(to_str(v));
    if (name == "capitalize") {
      std::string s = lower(to_str(v));
      if (!s.empty()) s[0] = char(std::toupper(static_cast<unsigned char>(s[0])));
      return Value::string(s);
    }
    if (name == "title") {
      std::string s = to_str(v);
      bool start = true;
      for (char& c : s) {
        const bool alpha = std::isalpha(static_cast<unsigned char>(c));
        c = char(start && alpha ? std::toupper(static_cast<unsigned char>(c))
                                : std::tolower(static_cast<unsigned char>(c)));
        start = !alpha && c != '\'';
        if (alpha) start = false;
      }
      return Value::string(s);
    }
    if (name == "escape" || name == "e") {
      const std::string text = to_str(v);
      size_t size = text.size();  // its size first: each of &<>"' grows to an entity
      for (char c : text)
        size += c == '&' || c == '"' || c == '\'' ? 4 : c == '<' || c == '>' ? 3 : 0;
      if (size > text.size()) check_string(size);
      std::string out;
      out.reserve(size);
      for (char c : text) {
        switch (c) {
          case '&':
            out += "&amp;";
            break;
          case '<':
            out += "&lt;";
            break;
          case '>':
            out += "&gt;";
            break;
          case '"':
            out += "&#34;";
            break;
          case '\'':
            out += "&#39;";
            break;
          default:
            out += c;
        }
      }
      return Value::string(out);
    }
    if (name == "replace") return replace(to_str(v), a);
    if (name == "tojson") {  // transformers': json.dumps(x, ensure_ascii, indent, separators, sort_keys)
      JsonStyle style;
      if (const Value* e = kwarg(a, 0, "ensure_ascii")) style.ensure_ascii = truthy(*e);
      if (const Value* indent = kwarg(a, 1, "indent"); indent && indent->kind != Value::Kind::None) {
        if (indent->is_string())
          style.indent = indent->s;
        else if (const auto n = small_int(*indent); n && indent->kind == Value::Kind::Int)
          style.indent = std::string(size_t(std::clamp<int64_t>(*n, 0, 1 << 16)), ' ');
        else
          throw CallError("tojson's indent must be an int or a str, got " +
                          std::string(type_name(*indent)));
        style.item_separator = ",";
      }
      if (const Value* sep = kwarg(a, 2, "separators"); sep && sep->kind != Value::Kind::None) {
        if (sep->kind != Value::Kind::List || sep->list->size() != 2 ||
            !(*sep->list)[0].is_string() || !(*sep->list)[1].is_string())
          throw CallError("tojson's separators must be two strings, (item, key)");
        style.item_separator = (*sep->list)[0].s;
        style.key_separator = (*sep->list)[1].s;
      }
      if (const Value* sort = kwarg(a, 3, "sort_keys")) style.sort_keys = truthy(*sort);
      return Value::string(to_json(v, style));
    }
    if (name == "int") {  // Jinja's do_int: int(v, base), else int(float(v)), else the default
      const Value* def = kwarg(a, 0, "default");
      const Value* base = kwarg(a, 1, "base");
      const Value fallback = def ? *def : Value::integer(0);
      if (v.is_int()) return Value::integer(v.as_mpz());
      if (v.kind == Value::Kind::Float)
        return std::isnan(v.f) ? fallback : int_of_float(v.f);  // inf: Python's OverflowError
      if (!v.is_string()) return fallback;
      int b = 10;
      if (base) {
        const auto n = small_int(*base);
        if (!n || base->kind != Value::Kind::Int) throw CallError("int's base must be an int");
        b = int(std::clamp<int64_t>(*n, -1, 99));
      }
      if (b == 0 || (b >= 2 && b <= 36))  // else int() raises ValueError: the float fallback
        if (auto r = parse_int(v.s, b)) return *r;
      const auto f = parse_float(v.s);  // int(float(v)): its OverflowError is caught here too
      if (!f || !std::isfinite(*f)) return fallback;
      return int_of_float(*f);
    }
    if (name == "float") {  // Jinja's do_float: float(v), else the default
      const Value* def = kwarg(a, 0, "default");
      if (v.is_number()) return Value::number(to_float(v));
      if (v.is_string())
        if (const auto f = parse_float(v.s)) return Value::number(*f);
      return def ? *def : Value::number(0);
    }
    if (name == "abs") {
      if (!v.is_number()) throw CallError("abs() of a " + std::string(type_name(v)));
      return absolute(v);
    }
    if (name == "round") {  // Jinja's do_round(value, precision=0, method='common')
      const Value* prec = kwarg(a, 0, "precision");
      const Value* method = kwarg(a, 1, "method");
      const std::string how = method ? to_str(*method) : "common";
      if (how != "common" && how != "ceil" && how != "floor")
        throw CallError("round's method must be common, ceil or floor");
      if (!v.is_number())
        throw CallError("type " + std::string(type_name(v)) + " doesn't define __round__ method");
      int64_t digits = 0;
      if (prec) {
        const auto n = small_int(*prec);
        if (!n || prec->kind == Value::Kind::Float)
          throw CallError("round's precision must be an int, got " + std::string(type_name(*prec)));
        digits = std::clamp<int64_t>(*n, -100000, 100000);
      }
      if (how == "common") return round_number(v, digits);
      // math.ceil/floor(value * 10**precision) / 10**precision
      const Value scale = arithmetic("**", Value::integer(10), Value::integer(digits));
      const Value scaled = arithmetic("*", v, scale);
      Value whole = scaled;
      if (scaled.kind == Value::Kind::Float)
        whole = int_of_float(how == "ceil" ? std::ceil(scaled.f) : std::floor(scaled.f));
      return arithmetic("/", whole, scale);
    }
    if (name == "wordcount") {  // runs of \w, as Jinja counts words
      const std::string s = to_str(v);
      int64_t words = 0;
      bool in_word = false;
      for (size_t k = 0; k < s.size();) {
        const bool w = py_word_char(next_code_point(s, k));
        words += w && !in_word;
        in_word = w;
      }
      return Value::integer(words);
    }
    std::vector<Value> items = iterate(v, at);
    if (name == "list") return Value::make_list(std::move(items));
    if (name == "first" || name == "last") {
      if (items.empty()) return Value::undefined(name);
      return name == "first" ? items.front() : items.back();
    }
    if (name == "reverse") {
      std::reverse(items.begin(), items.end());
      if (v.is_string()) {
        std::string s;
        for (const Value& c : items) s += c.s;
        return Value::string(s);
      }
      return Value::make_list(std::move(items));
    }
    if (name == "join") {
      const Value* sep = kwarg(a, 0, "d");
      const Value* attr = kwarg(a, 1, "attribute");
      const std::string between = sep ? to_str(*sep) : std::string();
      std::string out;
      for (size_t k = 0; k < items.size(); ++k)
        append(out, k ? between : std::string(),
               to_str(attr ? attribute_of(items[k], to_str(*attr), at) : items[k]));
      return Value::string(std::move(out));
    }
    if (name == "unique") {
      std::vector<Value> out;
      for (Value& x : items)
        if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equal(x, y); }))
          out.push_back(x);
      return Value::make_list(std::move(out));
    }
    if (name == "sum") {
      Value total = Value::integer(0);
      for (const Value& x : items) total = binary("+", total, x, at);
      return total;
    }
    if (name == "min" || name == "max") {
      if (items.empty()) return Value::undefined(name);
      Value best = items[0];
      for (const Value& x : items) {
        const int c = compare(x, best, at, *this);
        if (name == "min" ? c < 0 : c > 0) best = x;
      }
      return best;
    }
    if (name == "items") {
      if (!v.is_mapping())
        throw CallError("items of a " + std::string(type_name(v)) + ", expected a dict");
      std::vector<Value> out;
      for (const auto& [k, x] : *v.dict)
        out.push_back(Value::make_list({Value::string(k), x}, true));
      return Value::make_list(std::move(out));
    }
    if (name == "dictsort") {
      if (!v.is_mapping())
        throw CallError("dictsort of a " + std::string(type_name(v)) + ", expected a dict");
      const Value* cs = kwarg(a, 0, "case_sensitive");
      const Value* by = kwarg(a, 1, "by");
      const Value* rev = kwarg(a, 2, "reverse");
      const bool case_sensitive = cs && truthy(*cs), by_value = by && to_str(*by) == "value";
      std::vector<std::pair<std::string, Value>> entries(v.dict->begin(), v.dict->end());
      auto key = [&](const std::pair<std::string, Value>& e) {
        Value k = by_value ? e.second : Value::string(e.first);
        if (!case_sensitive && k.is_string()) k.s = lower(k.s);
        return k;
      };
      std::stable_sort(entries.begin(), entries.end(), [&](const auto& x, const auto& y) {
        return compare(key(x), key(y), at, *this) < 0;
      });
      if (rev && truthy(*rev)) std::reverse(entries.begin(), entries.end());
      std::vector<Value> out;
      for (auto& [k, x] : entries) out.push_back(Value::make_list({Value::string(k), x}, true));
      return Value::make_list(std::move(out));
    }
    if (name == "map") {
      std::vector<Value> out;
      const Value* attr = nullptr;
      for (auto& [n, x] : a.keywords)
        if (n == "attribute") attr = &x;
      if (attr) {
        const Value* def = nullptr;
        for (auto& [n, x] : a.keywords)
          if (n == "default") def = &x;
        for (const Value& x : items) {
          Value r = attribute_of(x, to_str(*attr), at);
          out.push_back(r.is_undefined() && def ? *def : r);
        }
        return Value::make_list(std::move(out));
      }
      if (a.positional.empty() || !a.positional[0].is_string())
        throw CallError("map() takes a filter name or attribute=");
      const std::string f = a.positional[0].s;
      if (!known_filter(f)) throw CallError("map(): the filter '" + f + "' is not supported");
      CallArgs rest;
      rest.positional.assign(a.positional.begin() + 1, a.positional.end());
      rest.keywords = a.keywords;
      for (Value& x : items) out.push_back(filter(f, x, rest, at));
      return Value::make_list(std::move(out));
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
      const bool attr = name.size() > 6;
      const bool keep_if = name[0] == 's';
      size_t k = 0;
      std::string path;
      if (attr) {
        if (a.positional.empty()) throw CallError(name + "() takes an attribute name");
        path = to_str(a.positional[k++]);
      }
      std::string test_name;
      if (k < a.positional.size()) test_name = to_str(a.positional[k++]);
      if (!test_name.empty() && !known_test(test_name))
        throw CallError(name + "(): the test '" + test_name + "' is not supported");
      CallArgs rest;
      rest.positional.assign(a.positional.begin() + std::ptrdiff_t(k), a.positional.end());
      std::vector<Value> out;
      for (Value& x : items) {
        const Value subject = attr ? attribute_of(x, path, at) : x;
        const bool pass = test_name.empty() ? truthy(subject) : test(test_name, subject, rest, at);
        if (pass == keep_if) out.push_back(x);
      }
      return Value::make_list(std::move(out));
    }
    error(at, "the filter '" + name + "' is not supported");
  }

  bool test(const std::string& name, const Value& v, CallArgs& a, Loc at) {
    const Value* a0 = kwarg(a, 0, "");
    auto need = [&]() -> const Value& {
      if (!a0) throw CallError("the test '" + name + "' takes an argument");
      return *a0;
    };
    using K = Value::Kind;
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.kind == K::None;
    if (name == "boolean") return v.kind == K::Bool;
    if (name == "true") return v.kind == K::Bool && v.b;
    if (name == "false") return v.kind == K::Bool && !v.b;
    if (name == "integer") return v.kind == K::Int;
    if (name == "float") return v.kind == K::Float;
    if (name == "number") return v.is_number();
    if (name == "string") return v.kind == K::String;
    if (name == "mapping") return v.kind == K::Dict;
    if (name == "sequence") return v.kind == K::String || v.kind == K::List || v.kind == K::Dict;
    if (name == "iterable")
      return v.kind == K::String || v.kind == K::List || v.kind == K::Dict || v.is_undefined();
    if (name == "callable") return v.kind == K::Function;
    if (name == "escaped") return false;
    if (name == "lower") return v.is_string() && lower(v.s) == v.s;
    if (name == "upper") return v.is_string() && upper(v.s) == v.s;
    if (name == "odd" || name == "even") {
      if (v.kind != K::Int) throw CallError("the test '" + name + "' takes an integer");
      return bool(mpz_odd_p(v.as_mpz().get_mpz_t())) == (name == "odd");
    }
    if (name == "divisibleby") {
      const Value& d = need();
      if (v.kind != K::Int || d.kind != K::Int || !truthy(d))
        throw CallError("divisibleby takes non-zero integers");
      return mpz_divisible_p(v.as_mpz().get_mpz_t(), d.as_mpz().get_mpz_t()) != 0;
    }
    if (name == "eq" || name == "equalto" || name == "sameas") return equal(v, need());
    if (name == "ne") return !equal(v, need());
    if (name == "lt" || name == "le" || name == "gt" || name == "ge") {
      const Value& w = need();
      // Numbers exactly, and false against nan, as Python's operators; others by compare.
      const std::partial_ordering c = v.is_number() && w.is_number()
                                          ? compare_numbers(v, w)
                                          : compare(v, w, at, *this) <=> 0;
      return name == "lt" ? c < 0 : name == "le" ? c <= 0 : name == "gt" ? c > 0 : c >= 0;
    }
    if (name == "in") return contains(need(), v, at);
    if (name == "filter") return need().is_string() && known_filter(need().s);
    if (name == "test") return need().is_string() && known_test(need().s);
    error(at, "the test '" + name + "' is not supported");
  }

  const std::string& name_;
  const Body& body_;
  const Limits& limits_;
  RenderTrace* trace_;
  Budget budget_;
  const std::string* top_ = nullptr;  // the output itself (macros and set blocks render apart)
  std::unordered_map<const Items*, size_t> watched_;
  std::vector<std::weak_ptr<Items>> namespaces_;  // the render's namespaces, emptied at its end
  size_t current_message_ = std::string::npos;  // the watched iteration in progress
  size_t lookahead_at_ = std::string::npos;     // the output size when it read a later message
  Scope* global_ = nullptr;
  int depth_ = 0;
  const char* stack_base_ = nullptr;  // the frame of run(): the stack grows down from it
};

}  // namespace

bool known_filter(const std::string& name) { return kFilters.count(name) > 0; }
bool known_test(const std::string& name) { return kTests.count(name) > 0; }

namespace {
void collect_names(const Expr& e, std::set<std::string>& names) {
  if (e.kind == Expr::Kind::Name) names.insert(e.name);
  for (const ExprPtr& a : e.args)
    if (a) collect_names(*a, names);
  for (const auto& [k, a] : e.keywords)
    if (a) collect_names(*a, names);
}
void collect_names(const Body& body, std::set<std::string>& names, bool& generation) {
  for (const NodePtr& n : body) {
    if (n->kind == Node::Kind::Generation) generation = true;
    for (const Expr* e : {n->expr.get(), n->filter.get()})
      if (e) collect_names(*e, names);
    for (const auto& [cond, b] : n->branches) {
      if (cond) collect_names(*cond, names);
      collect_names(b, names, generation);
    }
    for (const auto& [p, def] : n->params)
      if (def) collect_names(*def, names);
    collect_names(n->body, names, generation);
    collect_names(n->else_body, names, generation);
  }
}
}  // namespace

Template::Template(std::string_view source, std::string name)
    : name_(std::move(name)), body_(std::make_unique<Body>(parse(source, name_))) {
  std::set<std::string> names;
  collect_names(*body_, names, has_generation_);
  names_.assign(names.begin(), names.end());
}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;

std::string Template::render(const nlohmann::ordered_json& context, const Limits& limits,
                             RenderTrace* trace) const {
  return Renderer(name_, *body_, limits, trace).run(context);
}

}  // namespace gemmax::jinja
