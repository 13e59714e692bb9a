#include "gateway/jinja/parser.h"

#include <set>
#include <string>

#include "gateway/jinja/builtins.h"
#include "gateway/jinja/error.h"
#include "gateway/jinja/lexer.h"
#include "gateway/jinja/text.h"

namespace hearth::jinja {
namespace {

using T = Token::Type;

class Parser {
 public:
  Parser(std::vector<Token> tokens, const ParseLimits& limits)
      : tokens_(std::move(tokens)), limits_(limits) {
    // Macros may be called before (above) their definition; collect their names first.
    for (size_t i = 0; i + 2 < tokens_.size(); ++i) {
      if (tokens_[i].type == T::kBlockBegin && is_name(tokens_[i + 1], "macro") &&
          tokens_[i + 2].type == T::kName) {
        macros_.insert(tokens_[i + 2].text);
      }
    }
  }

  Program run() {
    Program program;
    std::string end;
    program.body = parse_body({}, &end);
    return program;
  }

 private:
  // ---- token stream -----------------------------------------------------------------------

  const Token& cur() const { return tokens_[pos_]; }
  const Token& look() const { return tokens_[pos_ + 1 < tokens_.size() ? pos_ + 1 : pos_]; }
  const Token& next() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }
  static bool is_name(const Token& t, std::string_view name) {
    return t.type == T::kName && t.text == name;
  }
  static bool is_op(const Token& t, std::string_view op) {
    return t.type == T::kOperator && t.text == op;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(cur(), name)) return false;
    next();
    return true;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(cur(), op)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case T::kData:
        return "template data";
      case T::kVariableBegin:
        return "'{{'";
      case T::kVariableEnd:
        return "end of print statement ('}}')";
      case T::kBlockBegin:
        return "'{%'";
      case T::kBlockEnd:
        return "end of statement block ('%}')";
      case T::kName:
        return "'" + t.text + "'";
      case T::kString:
        return "string literal";
      case T::kInteger:
      case T::kFloat:
        return "number " + t.text;
      case T::kOperator:
        return "'" + t.text + "'";
      case T::kEof:
        return "end of template";
    }
    return "token";
  }

  [[noreturn]] void fail(std::string message, int line = 0) const {
    throw TemplateError(TemplateError::Kind::kSyntax, line > 0 ? line : cur().line,
                        std::move(message));
  }
  [[noreturn]] void refuse(std::string message, int line = 0) const {
    throw TemplateError(TemplateError::Kind::kUnsupported, line > 0 ? line : cur().line,
                        std::move(message));
  }

  const Token& expect(T type, std::string_view what) {
    if (cur().type != type) fail("expected " + std::string(what) + ", got " + describe(cur()));
    return next();
  }
  void expect_op(std::string_view op) {
    if (!is_op(cur(), op)) fail("expected '" + std::string(op) + "', got " + describe(cur()));
    next();
  }
  const Token& expect_name() { return expect(T::kName, "a name"); }
  void expect_block_end() { expect(T::kBlockEnd, "end of statement block ('%}')"); }

  // Bounds recursion: nested blocks and nested expressions each count.
  class Nest {
   public:
    Nest(Parser& p, int& counter) : counter_(counter) {
      if (++counter_ > p.limits_.max_nesting) {
        throw TemplateError(
            TemplateError::Kind::kLimit, p.cur().line,
            "template nested deeper than " + std::to_string(p.limits_.max_nesting) + " levels");
      }
    }
    ~Nest() { --counter_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    int& counter_;
  };

  // ---- statements -------------------------------------------------------------------------

  // Parses statements until a block tag named in `ends` (or the end of the template when
  // `ends` is empty); consumes that tag's '{%' and name and stores the name in *end.
  Body parse_body(std::initializer_list<std::string_view> ends, std::string* end) {
    Nest nest(*this, block_depth_);
    const int start_line = cur().line;
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == T::kEof) {
        if (ends.size() == 0) return body;
        std::string wanted;
        for (std::string_view e : ends)
          wanted += (wanted.empty() ? "'" : " or '") + std::string(e) + "'";
        fail("unexpected end of template: the block opened on line " + std::to_string(start_line) +
             " needs " + wanted);
      }
      if (t.type == T::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->line = t.line;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
        continue;
      }
      if (t.type == T::kVariableBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = t.line;
        s->expr = parse_tuple(false, true, {}, false);
        expect(T::kVariableEnd, "end of print statement ('}}')");
        body.push_back(std::move(s));
        continue;
      }
      if (t.type != T::kBlockBegin) fail("unexpected " + describe(t));
      next();
      const Token& name = cur();
      if (name.type != T::kName)
        fail("expected a statement name after '{%', got " + describe(name));
      for (std::string_view e : ends) {
        if (name.text == e) {
          *end = name.text;
          next();
          return body;
        }
      }
      body.push_back(parse_statement());
    }
  }

  std::unique_ptr<Stmt> parse_statement() {
    const Token& t = cur();
    const std::string& tag = t.text;
    if (tag == "if") return parse_if();
    if (tag == "for") return parse_for();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "with") return parse_with();
    if (tag == "generation") return parse_generation();
    if (tag == "print") {
      auto s = make(Stmt::Kind::kOutput);
      s->expr = parse_tuple(false, true, {}, false);
      expect_block_end();
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail("'" + tag + "' outside of a for loop");
      auto s = make(tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue);
      expect_block_end();
      return s;
    }
    static const std::set<std::string, std::less<>> kKnownUnsupported = {
        "include", "import",     "from", "extends", "block", "call",
        "filter",  "autoescape", "do",   "trans",   "raw"};
    if (kKnownUnsupported.count(tag) != 0) refuse("the '{% " + tag + " %}' tag is not supported");
    static const std::set<std::string, std::less<>> kEnds = {
        "endif", "endfor", "endset", "endmacro", "endwith", "endgeneration", "else", "elif"};
    if (kEnds.count(tag) != 0) fail("unexpected '{% " + tag + " %}' with no block to close");
    fail("unknown tag '" + tag + "'");
  }

  std::unique_ptr<Stmt> make(Stmt::Kind kind) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = cur().line;
    next();  // the statement's name
    return s;
  }

  std::unique_ptr<Stmt> parse_if() {
    auto s = make(Stmt::Kind::kIf);
    while (true) {
      ExprPtr test = parse_tuple(false, false, {}, false);
      expect_block_end();
      std::string end;
      Body body = parse_body({"elif", "else", "endif"}, &end);
      s->branches.emplace_back(std::move(test), std::move(body));
      if (end == "elif") continue;
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"}, &end);
      }
      expect_block_end();
      return s;
    }
  }

  Target parse_target(bool with_namespace, std::initializer_list<std::string_view> extra_end) {
    Target target;
    const int line = cur().line;
    if (with_namespace && is_op(look(), ".")) {
      target.kind = Target::Kind::kNamespaceAttr;
      target.names.push_back(expect_name().text);
      next();  // '.'
      target.attribute = expect_name().text;
      return target;
    }
    bool tuple = false;
    if (skip_op("(")) {
      tuple = true;
      while (!is_op(cur(), ")")) {
        if (!target.names.empty()) expect_op(",");
        if (is_op(cur(), ")")) break;
        if (is_op(cur(), "(")) refuse("nested tuple assignment targets are not supported");
        target.names.push_back(expect_name().text);
      }
      next();
    } else {
      while (true) {
        if (is_op(cur(), "(")) refuse("nested tuple assignment targets are not supported");
        target.names.push_back(expect_name().text);
        if (!is_op(cur(), ",")) break;
        tuple = true;
        next();
        bool at_end = cur().type == T::kBlockEnd || cur().type == T::kVariableEnd;
        for (std::string_view e : extra_end) at_end = at_end || is_name(cur(), e);
        if (at_end || is_op(cur(), "=")) break;
      }
    }
    for (const std::string& n : target.names) {
      if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" ||
          n == "None") {
        fail("can't assign to '" + n + "'", line);
      }
    }
    target.kind = tuple ? Target::Kind::kNames : Target::Kind::kName;
    return target;
  }

  std::unique_ptr<Stmt> parse_for() {
    auto s = make(Stmt::Kind::kFor);
    s->target = parse_target(false, {"in"});
    if (!skip_name("in")) fail("expected 'in' in the for loop, got " + describe(cur()));
    s->expr = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->filter = parse_expression(true);
    if (is_name(cur(), "recursive")) refuse("recursive for loops are not supported");
    expect_block_end();
    std::string end;
    ++loop_depth_;
    s->body = parse_body({"endfor", "else"}, &end);
    --loop_depth_;
    if (end == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, &end);
    }
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> parse_set() {
    auto s = make(Stmt::Kind::kSet);
    s->target = parse_target(true, {});
    if (skip_op("=")) {
      s->expr = parse_tuple(false, true, {}, false);
      expect_block_end();
      return s;
    }
    if (is_op(cur(), "|"))
      refuse("filtered block assignments ({% set x | filter %}) are not supported");
    if (s->target.kind == Target::Kind::kNames) fail("a block assignment needs a single name");
    s->kind = Stmt::Kind::kSetBlock;
    expect_block_end();
    std::string end;
    s->body = parse_body({"endset"}, &end);
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> parse_macro() {
    if (block_depth_ > 1) refuse("macros must be defined at the top level of the template");
    auto s = make(Stmt::Kind::kMacro);
    s->name = expect_name().text;
    expect_op("(");
    while (!is_op(cur(), ")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(cur(), ")")) break;
      s->params.push_back(expect_name().text);
      if (skip_op("=")) {
        s->defaults.push_back(parse_expression(true));
      } else {
        for (const ExprPtr& d : s->defaults) {
          if (d) fail("non-default argument follows default argument");
        }
        s->defaults.push_back(nullptr);
      }
    }
    next();  // ')'
    expect_block_end();
    std::string end;
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endmacro"}, &end);
    loop_depth_ = saved_loops;
    if (cur().type == T::kName) next();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> parse_with() {
    auto s = make(Stmt::Kind::kWith);
    while (cur().type != T::kBlockEnd) {
      if (!s->params.empty()) expect_op(",");
      s->params.push_back(expect_name().text);
      expect_op("=");
      s->defaults.push_back(parse_expression(true));
    }
    expect_block_end();
    std::string end;
    s->body = parse_body({"endwith"}, &end);
    expect_block_end();
    return s;
  }

  // transformers' AssistantTracker: {% generation %} marks assistant text; rendering is plain.
  std::unique_ptr<Stmt> parse_generation() {
    auto s = make(Stmt::Kind::kScope);
    expect_block_end();
    std::string end;
    s->body = parse_body({"endgeneration"}, &end);
    expect_block_end();
    return s;
  }

  // ---- expressions ------------------------------------------------------------------------

  ExprPtr node(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;

    return e;
  }

  // Records the depth of a finished node. Evaluating and freeing a tree recurse through it,
  // so a long chain (a + b + c + ..., x|f|f|f...) is bounded like explicit nesting.
  ExprPtr seal(ExprPtr e) {
    int deepest = 0;
    bool slices = e->kind == Expr::Kind::kSlice;
    for (const ExprPtr& c : e->children) {
      if (!c) continue;
      deepest = std::max(deepest, c->depth);
      slices = slices || c->folds;
    }
    for (const Keyword& k : e->keywords) {
      deepest = std::max(deepest, k.value->depth);
      slices = slices || k.value->folds;
    }
    // Folding gives up at the first name or call it evaluates; skip subtrees where that is
    // certain (a name evaluated on every path), so e.g. messages[1:] never tries.
    bool must_name = e->kind == Expr::Kind::kName || e->kind == Expr::Kind::kCall;
    const bool short_circuits = e->kind == Expr::Kind::kAnd || e->kind == Expr::Kind::kOr ||
                                e->kind == Expr::Kind::kCondition;
    for (size_t i = 0; i < e->children.size() && !must_name; ++i) {
      if (short_circuits && i > 0) break;
      must_name = e->children[i] && e->children[i]->must_name;
    }
    e->must_name = must_name;
    e->folds = slices && !must_name;
    e->depth = deepest + 1;
    if (e->depth > limits_.max_expression_depth) {
      throw TemplateError(TemplateError::Kind::kLimit, e->line,
                          "expression nested deeper than " +
                              std::to_string(limits_.max_expression_depth) + " levels");
    }
    return e;
  }

  bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
    const Token& t = cur();
    if (t.type == T::kVariableEnd || t.type == T::kBlockEnd || is_op(t, ")")) return true;
    for (std::string_view e : extra_end) {
      if (is_name(t, e)) return true;
    }
    return false;
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr,
                      std::initializer_list<std::string_view> extra_end, bool explicit_parens) {
    const int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      args.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(cur(), ",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) fail("expected an expression, got " + describe(cur()));
    }
    auto e = node(Expr::Kind::kTuple, line);
    e->children = std::move(args);
    return seal(std::move(e));
  }

  ExprPtr parse_expression(bool with_condexpr) {
    Nest nest(*this, expr_depth_);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    int line = cur().line;
    ExprPtr expr1 = parse_or();
    while (skip_name("if")) {
      ExprPtr expr2 = parse_or();
      ExprPtr expr3;
      if (skip_name("else")) expr3 = parse_condexpr();
      auto e = node(Expr::Kind::kCondition, line);
      e->children.push_back(std::move(expr2));
      e->children.push_back(std::move(expr1));
      e->children.push_back(std::move(expr3));
      expr1 = seal(std::move(e));
      line = cur().line;
    }
    return expr1;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name(cur(), "or")) {
      const int line = next().line;
      auto e = node(Expr::Kind::kOr, line);
      e->children.push_back(std::move(left));
      e->children.push_back(parse_and());
      left = seal(std::move(e));
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name(cur(), "and")) {
      const int line = next().line;
      auto e = node(Expr::Kind::kAnd, line);
      e->children.push_back(std::move(left));
      e->children.push_back(parse_not());
      left = seal(std::move(e));
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name(cur(), "not")) {
      Nest nest(*this, expr_depth_);
      const int line = next().line;
      auto e = node(Expr::Kind::kNot, line);
      e->children.push_back(parse_not());
      return seal(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    std::vector<ExprPtr> operands;
    std::vector<CompareOp> ops;
    while (true) {
      const Token& t = cur();
      CompareOp op;
      if (is_op(t, "==")) {
        op = CompareOp::kEq;
      } else if (is_op(t, "!=")) {
        op = CompareOp::kNe;
      } else if (is_op(t, "<")) {
        op = CompareOp::kLt;
      } else if (is_op(t, "<=")) {
        op = CompareOp::kLe;
      } else if (is_op(t, ">")) {
        op = CompareOp::kGt;
      } else if (is_op(t, ">=")) {
        op = CompareOp::kGe;
      } else if (is_name(t, "in")) {
        op = CompareOp::kIn;
      } else if (is_name(t, "not") && is_name(look(), "in")) {
        next();
        op = CompareOp::kNotIn;
      } else {
        break;
      }
      next();
      ops.push_back(op);
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto e = node(Expr::Kind::kCompare, line);
    e->children.push_back(std::move(first));
    for (ExprPtr& o : operands) e->children.push_back(std::move(o));
    e->compare_ops = std::move(ops);
    return seal(std::move(e));
  }

  ExprPtr binary_node(BinaryOp op, ExprPtr left, ExprPtr right, int line) {
    auto e = node(Expr::Kind::kBinary, line);
    e->binary_op = op;
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return seal(std::move(e));
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op(cur(), "+") || is_op(cur(), "-")) {
      const Token& t = next();
      const BinaryOp op = t.text == "+" ? BinaryOp::kAdd : BinaryOp::kSub;
      left = binary_node(op, std::move(left), parse_concat(), t.line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    const int line = cur().line;
    ExprPtr first = parse_math2();
    if (!is_op(cur(), "~")) return first;
    auto e = node(Expr::Kind::kConcat, line);
    e->children.push_back(std::move(first));
    while (skip_op("~")) e->children.push_back(parse_math2());
    return seal(std::move(e));
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (true) {
      const Token& t = cur();
      BinaryOp op;
      if (is_op(t, "*")) {
        op = BinaryOp::kMul;
      } else if (is_op(t, "/")) {
        op = BinaryOp::kDiv;
      } else if (is_op(t, "//")) {
        op = BinaryOp::kFloorDiv;
      } else if (is_op(t, "%")) {
        if (left->kind == Expr::Kind::kLiteral && left->value.is_string() &&
            left->value.as_string().find('%') != std::string::npos) {
          refuse("printf-style string formatting ('...' % value) is not supported");
        }
        op = BinaryOp::kMod;
      } else {
        break;
      }
      const int line = next().line;
      left = binary_node(op, std::move(left), parse_pow(), line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op(cur(), "**")) {
      const int line = next().line;
      left = binary_node(BinaryOp::kPow, std::move(left), parse_unary(true), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    const Token& t = cur();
    ExprPtr e;
    if (is_op(t, "-") || is_op(t, "+")) {
      Nest nest(*this, expr_depth_);
      const int line = next().line;
      e = node(t.text == "-" ? Expr::Kind::kNeg : Expr::Kind::kPos, line);
      e->children.push_back(parse_unary(false));
      e = seal(std::move(e));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    ExprPtr e;
    switch (t.type) {
      case T::kName:
        if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
          e = node(Expr::Kind::kLiteral, t.line);
          e->value = Value::boolean(t.text == "true" || t.text == "True");
        } else if (t.text == "none" || t.text == "None") {
          e = node(Expr::Kind::kLiteral, t.line);
          e->value = Value::none();
        } else {
          e = node(Expr::Kind::kName, t.line);
          e->name = t.text;
        }
        next();
        return e;
      case T::kString: {
        e = node(Expr::Kind::kLiteral, t.line);
        std::string s;
        while (cur().type == T::kString) s += next().text;  // adjacent literals concatenate
        e->value = Value::string(std::move(s));
        return e;
      }
      case T::kInteger:
        e = node(Expr::Kind::kLiteral, t.line);
        e->value = Value::integer(t.int_value);
        next();
        return e;
      case T::kFloat:
        e = node(Expr::Kind::kLiteral, t.line);
        e->value = Value::floating(t.float_value);
        next();
        return e;
      case T::kOperator:
        if (t.text == "(") {
          next();
          e = parse_tuple(false, true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    fail("unexpected " + describe(t));
  }

  ExprPtr parse_list() {
    auto e = node(Expr::Kind::kList, next().line);
    while (!is_op(cur(), "]")) {
      if (!e->children.empty()) expect_op(",");
      if (is_op(cur(), "]")) break;
      e->children.push_back(parse_expression(true));
    }
    next();
    return seal(std::move(e));
  }

  ExprPtr parse_dict() {
    auto e = node(Expr::Kind::kDict, next().line);
    while (!is_op(cur(), "}")) {
      if (!e->children.empty()) expect_op(",");
      if (is_op(cur(), "}")) break;
      e->children.push_back(parse_expression(true));
      expect_op(":");
      e->children.push_back(parse_expression(true));
    }
    next();
    return seal(std::move(e));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(cur(), ".") || is_op(cur(), "[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op(cur(), "(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op(cur(), "|")) {
        e = parse_filter(std::move(e));
      } else if (is_name(cur(), "is")) {
        e = parse_test(std::move(e));
      } else if (is_op(cur(), "(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target) {
    const Token& t = next();
    if (t.text == ".") {
      const Token& attr = cur();
      if (attr.type == T::kName) {
        auto e = node(Expr::Kind::kGetAttr, t.line);
        e->name = attr.text;
        e->builtin = classify_attribute(attr.text);
        e->children.push_back(std::move(target));
        next();
        return seal(std::move(e));
      }
      if (attr.type != T::kInteger) fail("expected a name or number after '.'");
      auto e = node(Expr::Kind::kGetItem, t.line);
      e->children.push_back(std::move(target));
      auto index = node(Expr::Kind::kLiteral, attr.line);
      index->value = Value::integer(attr.int_value);
      e->children.push_back(std::move(index));
      next();
      return seal(std::move(e));
    }
    std::vector<ExprPtr> args;
    while (!is_op(cur(), "]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    next();
    auto e = node(Expr::Kind::kGetItem, t.line);
    e->children.push_back(std::move(target));
    if (args.size() == 1) {
      e->children.push_back(std::move(args[0]));
    } else {
      auto tuple = node(Expr::Kind::kTuple, t.line);
      tuple->children = std::move(args);
      e->children.push_back(seal(std::move(tuple)));
    }
    return seal(std::move(e));
  }

  ExprPtr parse_subscribed() {
    const int line = cur().line;
    std::vector<ExprPtr> parts;
    if (is_op(cur(), ":")) {
      next();
      parts.push_back(nullptr);
    } else {
      ExprPtr e = parse_expression(true);
      if (!is_op(cur(), ":")) return e;
      next();
      parts.push_back(std::move(e));
    }
    if (is_op(cur(), ":") || is_op(cur(), "]") || is_op(cur(), ",")) {
      parts.push_back(nullptr);
    } else {
      parts.push_back(parse_expression(true));
    }
    if (skip_op(":")) {
      parts.push_back(is_op(cur(), "]") || is_op(cur(), ",") ? nullptr : parse_expression(true));
    } else {
      parts.push_back(nullptr);
    }
    auto e = node(Expr::Kind::kSlice, line);
    e->children = std::move(parts);
    return seal(std::move(e));
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool require_comma = false;
    while (!is_op(cur(), ")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(cur(), ")")) break;
      }
      if (is_op(cur(), "*") || is_op(cur(), "**")) {
        refuse("*args and **kwargs in calls are not supported");
      }
      if (cur().type == T::kName && is_op(look(), "=")) {
        std::string key = next().text;
        next();  // '='
        e.keywords.push_back(Keyword{std::move(key), parse_expression(true)});
      } else {
        if (!e.keywords.empty()) fail("positional argument follows keyword argument");
        e.children.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    const int line = cur().line;
    auto e = node(Expr::Kind::kCall, line);
    if (callee->kind == Expr::Kind::kName) {
      const int global = find_global(callee->name);
      if (global >= 0) {
        callee->builtin = global;
      } else if (macros_.count(callee->name) == 0) {
        refuse(callee->name == "caller" ? "caller() (call blocks) is not supported"
                                        : "function '" + callee->name + "' is not supported",
               line);
      }
    } else if (callee->kind == Expr::Kind::kGetAttr) {
      if (callee->builtin < 0) refuse(method_refusal(callee->name), line);
    } else {
      refuse("calling the result of an expression is not supported", line);
    }
    e->children.push_back(std::move(callee));
    parse_call_args(*e);
    return seal(std::move(e));
  }

  ExprPtr parse_filter(ExprPtr input) {
    while (skip_op("|")) {
      const Token& name = expect_name();
      if (is_op(cur(), ".")) refuse("dotted filter names are not supported", name.line);
      const int id = find_filter(name.text);
      if (id < 0) refuse("filter '" + name.text + "' is not supported", name.line);
      auto e = node(Expr::Kind::kFilter, name.line);
      e->name = name.text;
      e->builtin = id;
      e->children.push_back(std::move(input));
      if (is_op(cur(), "(")) parse_call_args(*e);
      check_named_builtin(*e, name.text);
      input = seal(std::move(e));
    }
    return input;
  }

  // map('filter'), select('test'), selectattr('attr', 'test'): names given as literals are
  // checked now, like the filter itself.
  void check_named_builtin(const Expr& e, const std::string& filter) {
    const bool by_attribute = filter == "selectattr" || filter == "rejectattr";
    const bool test = by_attribute || filter == "select" || filter == "reject";
    if (!test && filter != "map") return;
    const size_t index = by_attribute ? 2 : 1;  // children[0] is the filtered value
    if (e.children.size() <= index) return;
    const Expr& arg = *e.children[index];
    if (arg.kind != Expr::Kind::kLiteral || !arg.value.is_string()) return;
    const std::string& name = arg.value.as_string();
    if (test ? find_test(name) < 0 : find_filter(name) < 0) {
      refuse(std::string(test ? "test '" : "filter '") + name + "' (used by " + filter +
                 ") is not supported",
             e.line);
    }
  }

  ExprPtr parse_test(ExprPtr input) {
    const int line = next().line;  // 'is'
    const bool negated = skip_name("not");
    const Token& name = expect_name();
    if (is_op(cur(), ".")) refuse("dotted test names are not supported", name.line);
    const int id = find_test(name.text);
    if (id < 0) refuse("test '" + name.text + "' is not supported", name.line);
    auto e = node(Expr::Kind::kTest, line);
    e->name = name.text;
    e->builtin = id;
    e->children.push_back(std::move(input));
    const Token& t = cur();
    if (is_op(t, "(")) {
      parse_call_args(*e);
    } else if ((t.type == T::kName || t.type == T::kString || t.type == T::kInteger ||
                t.type == T::kFloat || is_op(t, "[") || is_op(t, "{")) &&
               !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and")) {
      if (is_name(t, "is")) fail("you cannot chain multiple tests with 'is'");
      e->children.push_back(parse_postfix(parse_primary()));
    }
    if (!negated) return seal(std::move(e));
    auto n = node(Expr::Kind::kNot, line);
    n->children.push_back(seal(std::move(e)));
    return seal(std::move(n));
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  const ParseLimits& limits_;
  std::set<std::string, std::less<>> macros_;
  int block_depth_ = 0;
  int expr_depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Program parse_template(std::string_view source, const ParseLimits& limits) {
  if (source.size() > limits.max_source_bytes) {
    throw TemplateError(TemplateError::Kind::kLimit, 0,
                        "template is " + std::to_string(source.size()) + " bytes, more than " +
                            std::to_string(limits.max_source_bytes));
  }
  if (!text::is_valid_utf8(source)) {
    throw TemplateError(TemplateError::Kind::kSyntax, 0, "template is not valid UTF-8");
  }
  return Parser(tokenize(source), limits).run();
}

}  // namespace hearth::jinja
