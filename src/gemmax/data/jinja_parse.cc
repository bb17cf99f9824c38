// Lexer and parser of the Jinja subset that chat templates use. Whitespace follows Jinja with
// transformers' settings: trim_blocks (a block tag eats the newline after it), lstrip_blocks (the
// blanks before a block tag on its line go), `-` strips all whitespace on its side, `+` keeps it,
// and one trailing newline of the template is dropped.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "gemmax/base/error.h"
#include "gemmax/data/jinja_ast.h"
#include "gemmax/data/jinja_value.h"

namespace gemmax::jinja {
namespace {

struct Token {
  enum class Kind {
    Text,
    VarBegin,
    VarEnd,
    BlockBegin,
    BlockEnd,
    Name,
    String,
    Int,
    Float,
    Op,
    End
  };
  Kind kind;
  std::string text;
  Loc loc;
};

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& name) : name_(name) {
    // Newlines normalised to \n, one trailing newline dropped (Jinja's defaults).
    for (size_t k = 0; k < source.size(); ++k) {
      if (source[k] == '\r') {
        src_ += '\n';
        if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
      } else {
        src_ += source[k];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t start = src_.size();
      for (const char* open : {"{{", "{%", "{#"}) start = std::min(start, src_.find(open, pos_));
      std::string text = src_.substr(pos_, start - pos_);
      const Loc text_loc = loc(pos_);
      if (start == src_.size()) {
        emit_text(std::move(text), text_loc);
        break;
      }
      const char type = src_[start + 1];
      const char mod = start + 2 < src_.size() ? src_[start + 2] : 0;
      if (mod == '-') {
        while (size_t n = py_space_before(text, text.size())) text.resize(text.size() - n);
      } else if (type != '{' && mod != '+') {   // lstrip_blocks: Python's \s+, Unicode's too
        const size_t l = text.rfind('\n') + 1;  // npos + 1 == 0
        size_t blank = l;
        while (size_t n = py_space_at(text, blank)) blank += n;
        if ((l > 0 || line_starting) && blank == text.size()) text.resize(l);
      }
      emit_text(std::move(text), text_loc);
      const Loc tag_loc = loc(start);
      pos_ = start + 2 + (mod == '-' || mod == '+' ? 1 : 0);
      bool strip_after = false;
      if (type == '#') {
        const size_t close = src_.find("#}", pos_);
        if (close == std::string::npos)
          error(tag_loc, "a comment '{#' that is never closed with '#}'");
        strip_after = close > pos_ && src_[close - 1] == '-';
        const bool keep = close > pos_ && src_[close - 1] == '+';
        pos_ = close + 2;
        finish_tag(strip_after, !keep);
      } else {
        tokens_.push_back(
            {type == '{' ? Token::Kind::VarBegin : Token::Kind::BlockBegin, "", tag_loc});
        const bool keep = expression(type == '{' ? '}' : '%', tag_loc, strip_after);
        finish_tag(strip_after, type == '%' && !keep);
      }
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    tokens_.push_back({Token::Kind::End, "", loc(src_.size())});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void error(Loc at, const std::string& what) {
    fail(name_, ":", at.line, ":", at.column, ": ", what);
  }

  Loc loc(size_t at) {
    while (loc_pos_ < at) {
      if (src_[loc_pos_] == '\n') {
        ++loc_.line;
        loc_.column = 1;
      } else if ((static_cast<unsigned char>(src_[loc_pos_]) & 0xC0) != 0x80) {
        ++loc_.column;
      }
      ++loc_pos_;
    }
    return loc_;
  }

  void emit_text(std::string text, Loc at) {
    if (!text.empty()) tokens_.push_back({Token::Kind::Text, std::move(text), at});
  }

  void finish_tag(bool strip_after, bool trim_newline) {
    if (strip_after) {
      while (size_t n = py_space_at(src_, pos_)) pos_ += n;
    } else if (trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
  }

  // Tokens up to the closing "}}" or "%}"; returns whether it was "+%}".
  bool expression(char close, Loc tag_loc, bool& strip_after) {
    auto closes_at = [&](size_t at) {
      return at + 1 < src_.size() && src_[at] == close && src_[at + 1] == '}';
    };
    for (;;) {
      while (size_t n = py_space_at(src_, pos_)) pos_ += n;
      if (pos_ >= src_.size())
        error(tag_loc, std::string("a tag that is never closed with '") + close + "}'");
      const Loc at = loc(pos_);
      const char c = src_[pos_];
      if (closes_at(pos_) || ((c == '-' || c == '+') && closes_at(pos_ + 1))) {
        strip_after = c == '-';
        const bool keep = c == '+';
        pos_ += closes_at(pos_) ? 2 : 3;
        tokens_.push_back({close == '}' ? Token::Kind::VarEnd : Token::Kind::BlockEnd, "", at});
        return keep;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t end = pos_;
        while (end < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_'))
          ++end;
        tokens_.push_back({Token::Kind::Name, src_.substr(pos_, end - pos_), at});
        pos_ = end;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t end = pos_;
        bool is_float = false;
        while (end < src_.size() && std::isdigit(static_cast<unsigned char>(src_[end]))) ++end;
        if (end + 1 < src_.size() && src_[end] == '.' &&
            std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
          is_float = true;
          for (++end; end < src_.size() && std::isdigit(static_cast<unsigned char>(src_[end]));)
            ++end;
        }
        if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
          size_t e = end + 1;
          if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
          if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
            is_float = true;
            for (end = e; end < src_.size() && std::isdigit(static_cast<unsigned char>(src_[end]));)
              ++end;
          }
        }
        tokens_.push_back(
            {is_float ? Token::Kind::Float : Token::Kind::Int, src_.substr(pos_, end - pos_), at});
        pos_ = end;
      } else if (c == '\'' || c == '"') {
        tokens_.push_back({Token::Kind::String, string_literal(c, at), at});
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                     "/",  "%",  "~",  "<",  ">",  "(",  ")", "[", "]",
                                     "{",  "}",  ",",  ".",  ":",  "|",  "="};
        const char* found = nullptr;
        for (const char* op : kOps)
          if (src_.compare(pos_, std::char_traits<char>::length(op), op) == 0) {
            found = op;
            break;
          }
        if (!found) error(at, std::string("unexpected character '") + c + "' in an expression");
        tokens_.push_back({Token::Kind::Op, found, at});
        pos_ += std::char_traits<char>::length(found);
      }
    }
  }

  // A quoted string with Python's escapes; pos_ is at the opening quote.
  std::string string_literal(char quote, Loc at) {
    std::string out;
    for (++pos_;; ++pos_) {
      if (pos_ >= src_.size()) error(at, "a string that is never closed");
      const char c = src_[pos_];
      if (c == quote) {
        ++pos_;
        return out;
      }
      if (c != '\\' || pos_ + 1 >= src_.size()) {
        out += c;
        continue;
      }
      const char e = src_[++pos_];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '0':
          out += '\0';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case '\n':
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + n >= src_.size()) error(at, "a truncated \\x/\\u escape in a string");
          const std::string hex = src_.substr(pos_ + 1, n);
          if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
            error(at, "a \\" + std::string(1, e) + " escape needs " + std::to_string(n) +
                          " hex digits");
          append_utf8(uint32_t(std::strtoul(hex.c_str(), nullptr, 16)), out);
          pos_ += n;
          break;
        }
        default:
          out += '\\';
          out += e;
      }
    }
  }

  static void append_utf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | ((cp >> 18) & 0x07));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  std::string src_;
  const std::string& name_;
  size_t pos_ = 0;
  size_t loc_pos_ = 0;
  Loc loc_;
  std::vector<Token> tokens_;
};

const char* kStatements =
    "if, elif, else, endif, for, endfor, set, endset, macro, endmacro, break, continue, "
    "generation, endgeneration";

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& name) : t_(std::move(tokens)), name_(name) {}

  Body parse_template() {
    std::string stop;
    Body body = parse_body({}, stop);
    return body;
  }

 private:
  [[noreturn]] void error(Loc at, const std::string& what) {
    fail(name_, ":", at.line, ":", at.column, ": ", what);
  }
  // Nesting (of blocks, parentheses, unary operators) is bounded so that the recursive descent,
  // the renderer and the tree's destructor cannot overflow the stack on a hostile template.
  static constexpr int kMaxDepth = 500;
  void deeper() {
    if (++depth_ > kMaxDepth)
      error(peek().loc, "the template nests or chains deeper than " + std::to_string(kMaxDepth) +
                            " levels (blocks, brackets, or operators and filters in one "
                            "expression such as a + b + ...); split it with {% set %}");
  }
  struct Nest {
    Parser& p;
    explicit Nest(Parser& parser) : p(parser) { p.deeper(); }
    ~Nest() { --p.depth_; }
  };
  // A chain (a + b + c, x | f | g, a.b[c](d)) is parsed by a loop but builds a tree as deep as
  // it is long: each link counts as a level.
  struct Chain {
    Parser& p;
    int links = 0;
    explicit Chain(Parser& parser) : p(parser) {}
    void link() {
      ++links;
      p.deeper();
    }
    ~Chain() { p.depth_ -= links; }
  };

  const Token& peek(size_t ahead = 0) const { return t_[std::min(p_ + ahead, t_.size() - 1)]; }
  const Token& next() { return t_[std::min(p_++, t_.size() - 1)]; }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::Op && peek(ahead).text == op;
  }
  bool is_name(const char* n, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::Name && peek(ahead).text == n;
  }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++p_;
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    ++p_;
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Token::Kind::End:
        return "the end of the template";
      case Token::Kind::VarEnd:
        return "'}}'";
      case Token::Kind::BlockEnd:
        return "'%}'";
      case Token::Kind::Text:
        return "text";
      case Token::Kind::String:
        return "a string";
      default:
        return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op))
      error(peek().loc, std::string("expected '") + op + "', got " + describe(peek()));
  }
  std::string expect_name(const char* what) {
    if (peek().kind != Token::Kind::Name)
      error(peek().loc, std::string("expected ") + what + ", got " + describe(peek()));
    return next().text;
  }
  void expect_block_end(const std::string& tag) {
    if (peek().kind != Token::Kind::BlockEnd)
      error(peek().loc, "expected '%}' to end the '" + tag + "' tag, got " + describe(peek()));
    ++p_;
  }

  static ExprPtr make(Expr::Kind kind, Loc loc, std::string name = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->loc = loc;
    e->name = std::move(name);
    return e;
  }

  // Statements up to one of `stops` ("{% endif %}" and the like, consumed up to its name).
  Body parse_body(const std::vector<std::string>& stops, std::string& stop) {
    Nest nest(*this);
    Body body;
    for (;;) {
      const Token& t = peek();
      if (t.kind == Token::Kind::End) {
        if (!stops.empty())
          error(t.loc, "the template ends inside a block: expected '{% " + stops.back() + " %}'");
        return body;
      }
      if (t.kind == Token::Kind::Text) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::Text;
        n->loc = t.loc;
        n->text = t.text;
        body.push_back(std::move(n));
        ++p_;
      } else if (t.kind == Token::Kind::VarBegin) {
        ++p_;
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::Output;
        n->loc = t.loc;
        n->expr = parse_tuple_or_expr();
        if (peek().kind != Token::Kind::VarEnd)
          error(peek().loc, "expected '}}', got " + describe(peek()));
        ++p_;
        body.push_back(std::move(n));
      } else if (t.kind == Token::Kind::BlockBegin) {
        ++p_;
        const Token& kw = peek();
        if (kw.kind != Token::Kind::Name) error(kw.loc, "expected a statement name after '{%'");
        for (const std::string& s : stops)
          if (kw.text == s) {
            ++p_;
            stop = s;
            return body;
          }
        body.push_back(parse_statement());
      } else {
        error(t.loc, "unexpected " + describe(t));
      }
    }
  }

  NodePtr parse_statement() {
    const Token kw = next();
    auto n = std::make_unique<Node>();
    n->loc = kw.loc;
    if (kw.text == "if") {
      n->kind = Node::Kind::If;
      ExprPtr cond = parse_expr();
      expect_block_end("if");
      for (;;) {
        std::string stop;
        Body body = parse_body({"elif", "else", "endif"}, stop);
        n->branches.emplace_back(std::move(cond), std::move(body));
        if (stop == "endif") break;
        if (stop == "else") {
          expect_block_end("else");
          std::string end;
          Body else_body = parse_body({"endif"}, end);
          n->branches.emplace_back(nullptr, std::move(else_body));
          break;
        }
        cond = parse_expr();
        expect_block_end("elif");
      }
      expect_block_end("endif");
    } else if (kw.text == "for") {
      n->kind = Node::Kind::For;
      do n->targets.push_back(expect_name("a loop variable"));
      while (skip_op(","));
      if (!skip_name("in"))
        error(peek().loc, "expected 'in' in the for loop, got " + describe(peek()));
      n->expr = parse_or();
      if (skip_name("if")) n->filter = parse_or();
      if (is_name("recursive")) error(peek().loc, "recursive loops are not supported");
      expect_block_end("for");
      std::string stop;
      n->body = parse_body({"else", "endfor"}, stop);
      if (stop == "else") {
        expect_block_end("else");
        n->else_body = parse_body({"endfor"}, stop);
      }
      expect_block_end("endfor");
    } else if (kw.text == "set") {
      n->targets.push_back(expect_name("a variable name"));
      if (skip_op(".")) {
        n->attribute = expect_name("an attribute name");
      } else {
        while (skip_op(",")) n->targets.push_back(expect_name("a variable name"));
      }
      if (skip_op("=")) {
        n->kind = Node::Kind::Set;
        n->expr = parse_tuple_or_expr();
        expect_block_end("set");
      } else {
        if (n->targets.size() != 1 || !n->attribute.empty())
          error(kw.loc, "a block set ('{% set x %}...{% endset %}') assigns one plain name");
        n->kind = Node::Kind::SetBlock;
        expect_block_end("set");
        std::string stop;
        n->body = parse_body({"endset"}, stop);
        expect_block_end("endset");
      }
    } else if (kw.text == "macro") {
      n->kind = Node::Kind::Macro;
      n->targets.push_back(expect_name("the macro's name"));
      expect_op("(");
      while (!skip_op(")")) {
        if (!n->params.empty()) expect_op(",");
        std::string param = expect_name("a parameter name");
        ExprPtr def;
        if (skip_op("=")) def = parse_expr();
        n->params.emplace_back(std::move(param), std::move(def));
      }
      expect_block_end("macro");
      std::string stop;
      n->body = parse_body({"endmacro"}, stop);
      expect_block_end("endmacro");
    } else if (kw.text == "generation") {
      // transformers' AssistantTracker extension: the text inside is the assistant's, the text
      // its assistant mask counts; rendered as is.
      n->kind = Node::Kind::Generation;
      expect_block_end("generation");
      std::string stop;
      n->body = parse_body({"endgeneration"}, stop);
      expect_block_end("endgeneration");
    } else if (kw.text == "break" || kw.text == "continue") {
      n->kind = kw.text == "break" ? Node::Kind::Break : Node::Kind::Continue;
      if (!in_loop()) error(kw.loc, "'" + kw.text + "' outside a for loop");
      expect_block_end(kw.text);
    } else if (kw.text == "elif" || kw.text == "else" || kw.text.starts_with("end")) {
      // A closing or continuing tag with nothing open: a syntax error, as Jinja says.
      error(kw.loc, "unexpected '{% " + kw.text + " %}': no open block takes it here (" +
                        (kw.text == "elif" || kw.text == "else" || kw.text == "endif"
                             ? std::string("an if")
                             : "a " + kw.text.substr(3)) +
                        " block must be open)");
    } else {
      error(kw.loc, "the statement '{% " + kw.text +
                        " %}' is not supported by gemmax's template "
                        "renderer (supported: " +
                        kStatements + ")");
    }
    return n;
  }

  // Loop controls are accepted anywhere inside a for body; Jinja checks the same at compile time
  // but we only know the nesting through the token stream, so scan back for an open for.
  bool in_loop() const {
    int depth = 0;
    for (size_t k = p_; k-- > 0;) {
      if (t_[k].kind != Token::Kind::Name || k == 0 || t_[k - 1].kind != Token::Kind::BlockBegin)
        continue;
      if (t_[k].text == "endfor")
        ++depth;
      else if (t_[k].text == "for" && depth-- == 0)
        return true;
      else if (t_[k].text == "macro")
        return false;
    }
    return false;
  }

  ExprPtr parse_tuple_or_expr() {
    const Loc at = peek().loc;
    ExprPtr first = parse_expr();
    if (!is_op(",")) return first;
    auto t = make(Expr::Kind::Tuple, at);
    t->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (peek().kind == Token::Kind::VarEnd || peek().kind == Token::Kind::BlockEnd) break;
      t->args.push_back(parse_expr());
    }
    return t;
  }

  ExprPtr parse_expr() {
    Chain chain(*this);
    ExprPtr e = parse_or();
    while (is_name("if")) {
      chain.link();
      const Loc at = next().loc;
      auto c = make(Expr::Kind::Cond, at);
      c->args.push_back(std::move(e));
      c->args.push_back(parse_or());
      c->args.push_back(skip_name("else") ? parse_expr() : nullptr);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const std::string& op, Loc at, ExprPtr a, ExprPtr b) {
    auto e = make(Expr::Kind::Binary, at, op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    Chain chain(*this);
    while (is_name("or")) {
      chain.link();
      const Loc at = next().loc;
      e = binary("or", at, std::move(e), parse_and());
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    Chain chain(*this);
    while (is_name("and")) {
      chain.link();
      const Loc at = next().loc;
      e = binary("and", at, std::move(e), parse_not());
    }
    return e;
  }
  ExprPtr parse_not() {
    Nest nest(*this);
    if (is_name("not")) {
      auto e = make(Expr::Kind::Unary, next().loc, "not");
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    Chain chain(*this);
    ExprPtr e = parse_math1();
    for (;;) {
      chain.link();
      const Loc at = peek().loc;
      std::string op;
      if (peek().kind == Token::Kind::Op &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
           peek().text == "<=" || peek().text == ">" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        ++p_;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        p_ += 2;
        op = "notin";
      } else {
        return e;
      }
      e = binary(op, at, std::move(e), parse_math1());
    }
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    Chain chain(*this);
    while (is_op("+") || is_op("-")) {
      chain.link();
      const Token& t = next();
      e = binary(t.text, t.loc, std::move(e), parse_concat());
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    Chain chain(*this);
    while (is_op("~")) {
      chain.link();
      const Loc at = next().loc;
      e = binary("~", at, std::move(e), parse_math2());
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    Chain chain(*this);
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      chain.link();
      const Token& t = next();
      e = binary(t.text, t.loc, std::move(e), parse_pow());
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    Chain chain(*this);
    while (is_op("**")) {
      chain.link();
      const Loc at = next().loc;
      e = binary("**", at, std::move(e), parse_unary(true));
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    Nest nest(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      e = make(Expr::Kind::Unary, t.loc, t.text);
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filter_expr(std::move(e)) : std::move(e);
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.kind) {
      case Token::Kind::Name: {
        ++p_;
        const std::string& n = t.text;
        if (n == "true" || n == "True") return literal(Value::boolean(true), t.loc);
        if (n == "false" || n == "False") return literal(Value::boolean(false), t.loc);
        if (n == "none" || n == "None") return literal(Value::none(), t.loc);
        return make(Expr::Kind::Name, t.loc, n);
      }
      case Token::Kind::String: {
        std::string s;
        const Loc at = t.loc;
        while (peek().kind == Token::Kind::String) s += next().text;  // adjacent strings join
        return literal(Value::string(std::move(s)), at);
      }
      case Token::Kind::Int: {
        ++p_;
        return literal(Value::integer(mpz_class(t.text, 10)), t.loc);  // Python's: no bound
      }
      case Token::Kind::Float:
        ++p_;
        return literal(Value::number(std::strtod(t.text.c_str(), nullptr)), t.loc);
      case Token::Kind::Op:
        if (t.text == "(") {
          ++p_;
          if (skip_op(")")) return make(Expr::Kind::Tuple, t.loc);
          ExprPtr e = parse_expr();
          if (is_op(",")) {
            auto tuple = make(Expr::Kind::Tuple, t.loc);
            tuple->args.push_back(std::move(e));
            while (skip_op(",") && !is_op(")")) tuple->args.push_back(parse_expr());
            e = std::move(tuple);
          }
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          ++p_;
          auto e = make(Expr::Kind::List, t.loc);
          while (!skip_op("]")) {
            if (!e->args.empty()) {
              expect_op(",");
              if (skip_op("]")) break;
            }
            e->args.push_back(parse_expr());
          }
          return e;
        }
        if (t.text == "{") {
          ++p_;
          auto e = make(Expr::Kind::Dict, t.loc);
          while (!skip_op("}")) {
            if (!e->args.empty()) {
              expect_op(",");
              if (skip_op("}")) break;
            }
            e->args.push_back(parse_expr());
            expect_op(":");
            e->args.push_back(parse_expr());
          }
          return e;
        }
        break;
      default:
        break;
    }
    error(t.loc, "expected a value, got " + describe(t));
  }

  static ExprPtr literal(Value v, Loc at) {
    auto e = make(Expr::Kind::Literal, at);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    Chain chain(*this);
    for (;;) {
      chain.link();
      const Loc at = peek().loc;
      if (skip_op(".")) {
        const Token& t = next();
        if (t.kind == Token::Kind::Int) {
          auto g = make(Expr::Kind::GetItem, at);
          g->args.push_back(std::move(e));
          g->args.push_back(
              literal(Value::integer(std::strtoll(t.text.c_str(), nullptr, 10)), t.loc));
          e = std::move(g);
        } else if (t.kind == Token::Kind::Name) {
          auto g = make(Expr::Kind::GetAttr, at, t.text);
          g->args.push_back(std::move(e));
          e = std::move(g);
        } else {
          error(t.loc, "expected an attribute name after '.', got " + describe(t));
        }
      } else if (skip_op("[")) {
        ExprPtr bounds[3];
        bool slice = false;
        if (!is_op(":")) bounds[0] = parse_expr();
        if (skip_op(":")) {
          slice = true;
          if (!is_op(":") && !is_op("]")) bounds[1] = parse_expr();
          if (skip_op(":") && !is_op("]")) bounds[2] = parse_expr();
        }
        expect_op("]");
        auto g = make(slice ? Expr::Kind::Slice : Expr::Kind::GetItem, at);
        g->args.push_back(std::move(e));
        if (!slice && !bounds[0]) error(at, "an empty subscript '[]'");
        for (int k = 0; k < (slice ? 3 : 1); ++k) g->args.push_back(std::move(bounds[k]));
        e = std::move(g);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto c = make(Expr::Kind::Call, callee->loc);
    c->args.push_back(std::move(callee));
    call_args(*c);
    return c;
  }

  // Arguments after args[0]: "(" [expr | name=expr] {"," ...} [","] ")".
  void call_args(Expr& node) {
    expect_op("(");
    bool first = true;
    while (!skip_op(")")) {
      if (!first) {
        expect_op(",");
        if (skip_op(")")) break;
      }
      first = false;
      if (peek().kind == Token::Kind::Name && is_op("=", 1)) {
        std::string key = next().text;
        ++p_;
        node.keywords.emplace_back(std::move(key), parse_expr());
      } else {
        if (!node.keywords.empty())
          error(peek().loc, "a positional argument after a keyword argument");
        node.args.push_back(parse_expr());
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    Chain chain(*this);
    for (;;) {
      chain.link();
      if (is_op("|")) {
        const Loc at = next().loc;
        const Token& t = peek();
        std::string name = expect_name("a filter name after '|'");
        if (!known_filter(name))
          error(t.loc, "the filter '" + name + "' is not supported by gemmax's template renderer");
        auto f = make(Expr::Kind::Filter, at, name);
        f->args.push_back(std::move(e));
        if (is_op("(")) call_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        const Loc at = next().loc;
        const bool negated = skip_name("not");
        const Token& t = peek();
        std::string name = expect_name("a test name after 'is'");
        if (!known_test(name))
          error(t.loc, "the test '" + name + "' is not supported by gemmax's template renderer");
        auto f = make(Expr::Kind::Test, at, name);
        f->negated = negated;
        f->args.push_back(std::move(e));
        if (is_op("(")) {
          call_args(*f);
        } else {
          const Token& a = peek();
          const bool keyword = a.text == "else" || a.text == "or" || a.text == "and" ||
                               a.text == "if" || a.text == "is" || a.text == "not" ||
                               a.text == "in";
          if (a.kind == Token::Kind::String || a.kind == Token::Kind::Int ||
              a.kind == Token::Kind::Float || (a.kind == Token::Kind::Name && !keyword))
            f->args.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(f);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  const std::string& name_;
  size_t p_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse(std::string_view source, const std::string& name) {
  return Parser(Lexer(source, name).run(), name).parse_template();
}

}  // namespace gemmax::jinja
