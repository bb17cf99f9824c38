// The parsed form of a Jinja template (internal to jinja_parse.cc and jinja_render.cc).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gemmax/data/jinja_value.h"

namespace gemmax::jinja {

struct Loc {
  int line = 1, column = 1;
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

// One node kind per syntactic form; `args` holds the operands in the order the comments say.
struct Expr {
  enum class Kind {
    Literal,  // value
    Name,     // name
    GetAttr,  // args[0].name
    GetItem,  // args[0][args[1]]
    Slice,    // args[0][args[1]:args[2]:args[3]], each bound possibly null
    Call,     // args[0](args[1..], keywords)
    Filter,   // args[0] | name(args[1..], keywords)
    Test,     // args[0] is [not] name(args[1..])
    Unary,    // name ("not", "-", "+") args[0]
    Binary,   // args[0] name args[1]; name: or and in notin == != < <= > >= + - ~ * / // % **
    Cond,     // args[0] if args[1] else args[2] (null: undefined)
    List,     // [args...]
    Tuple,    // (args...)
    Dict,     // {args[0]: args[1], args[2]: args[3], ...}
  };
  Kind kind;
  Loc loc;
  std::string name;
  Value value;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  bool negated = false;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Macro, Break, Continue, Generation };
  Kind kind;
  Loc loc;
  std::string text;                                // Text
  ExprPtr expr;                                    // Output, Set: the value; For: the iterable
  std::vector<std::string> targets;                // For, Set, SetBlock: names; Macro: [name]
  std::string attribute;                           // Set: `set targets[0].attribute = expr`
  ExprPtr filter;                                  // For: `for x in xs if filter`
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: (condition, body); else: null condition
  Body body, else_body;  // For (else: no iteration), SetBlock, Macro, Generation
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro: names and defaults (or null)
};

// Parses with transformers' settings (trim_blocks, lstrip_blocks, loop controls); throws
// gemmax::Error "name:line:column: ..." for what it cannot parse or does not support.
Body parse(std::string_view source, const std::string& name);

// The filters and tests the renderer implements (the parser refuses others).
bool known_filter(const std::string& name);
bool known_test(const std::string& name);

}  // namespace gemmax::jinja
