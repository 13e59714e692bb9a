#include "gateway/jinja/interpreter.h"

#include <memory>
#include <utility>
#include <vector>

#include "gateway/jinja/builtins.h"
#include "gateway/jinja/error.h"
#include "gateway/jinja/operators.h"

namespace hearth::jinja {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

class Interpreter {
 public:
  Interpreter(const DictData& variables, const RenderOptions& options)
      : variables_(variables),
        limits_(options.limits),
        ctx_{options.limits.max_output_bytes, options.now} {
    frames_.emplace_back();  // the template's top-level scope
  }

  std::string run(const Program& program) {
    try {
      exec(program.body);
    } catch (const TemplateError& e) {
      if (e.line() == 0) throw e.with_line(line_);
      throw;
    }
    return std::move(out_);
  }

 private:
  using Frame = std::vector<std::pair<std::string, Value>>;

  // ---- scopes -----------------------------------------------------------------------------

  // Pushes a scope for its lifetime; `isolate` hides the enclosing scopes (a macro body sees
  // only its own scope, the template's top level and the context).
  class Scope {
   public:
    Scope(Interpreter& in, bool isolate) : in_(in), saved_floor_(in.floor_) {
      in_.frames_.emplace_back();
      if (isolate) in_.floor_ = in_.frames_.size() - 1;
    }
    ~Scope() {
      in_.frames_.pop_back();
      in_.floor_ = saved_floor_;
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Interpreter& in_;
    size_t saved_floor_;
  };

  static const Value* find_in(const Frame& frame, const std::string& name) {
    for (auto it = frame.rbegin(); it != frame.rend(); ++it) {
      if (it->first == name) return &it->second;
    }
    return nullptr;
  }

  Value lookup(const std::string& name) const {
    for (size_t i = frames_.size(); i-- > floor_;) {
      if (const Value* v = find_in(frames_[i], name)) return *v;
    }
    if (floor_ > 0) {
      if (const Value* v = find_in(frames_[0], name)) return *v;
    }
    if (const Value* v = variables_.find(name)) return *v;
    if (const int global = find_global(name); global >= 0) {
      Callable c;
      c.kind = Callable::Kind::kGlobal;
      c.id = global;
      c.name = name;
      return Value::callable(std::move(c));
    }
    return Value::undefined("'" + name + "' is undefined");
  }

  void store(const std::string& name, Value value) {
    Frame& frame = frames_.back();
    for (auto& [n, v] : frame) {
      if (n == name) {
        v = std::move(value);
        return;
      }
    }
    frame.emplace_back(name, std::move(value));
  }

  void assign(const Target& target, const Value& value) {
    switch (target.kind) {
      case Target::Kind::kName:
        store(target.names[0], value);
        return;
      case Target::Kind::kNames: {
        const std::vector<Value> items = iterate(value);
        const size_t want = target.names.size();
        if (items.size() < want) {
          runtime_error("not enough values to unpack (expected " + std::to_string(want) + ", got " +
                        std::to_string(items.size()) + ")");
        }
        if (items.size() > want) {
          runtime_error("too many values to unpack (expected " + std::to_string(want) + ")");
        }
        for (size_t i = 0; i < want; ++i) store(target.names[i], items[i]);
        return;
      }
      case Target::Kind::kNamespaceAttr: {
        const Value ns = lookup(target.names[0]);
        if (!ns.is_namespace()) {
          runtime_error("cannot assign attribute '" + target.attribute + "' on '" +
                        target.names[0] + "', which is not a namespace");
        }
        // Namespaces and loops are the only mutable objects; keeping them out of namespaces
        // keeps every value acyclic.
        if (value.is_namespace() || value.is_loop() || contains_mutable(value, 0)) {
          runtime_error("a namespace cannot hold a namespace or a loop object");
        }
        ns.as_namespace().attributes.set(Value::string(target.attribute), value);
        return;
      }
    }
  }

  static bool contains_mutable(const Value& v, int depth) {
    if (v.is_namespace() || v.is_loop()) return true;
    if (depth > kMaxValueDepth) return false;
    if (v.is_list() || v.is_iterator()) {
      for (const Value& item : v.is_list() ? v.as_list().items : v.as_iterator().items) {
        if (contains_mutable(item, depth + 1)) return true;
      }
    } else if (v.is_dict()) {
      for (const auto& [k, item] : v.as_dict().items()) {
        if (contains_mutable(item, depth + 1)) return true;
      }
    }
    return false;
  }

  // ---- budget and output ------------------------------------------------------------------

  void charge(uint64_t units) {
    work_ += units;
    if (work_ > limits_.max_work) {
      limit_error("rendering took more than " + std::to_string(limits_.max_work) +
                  " steps (a loop or recursion too large for a chat template)");
    }
  }

  void charge_built(const Value& v) {
    if (v.is_string()) charge(v.as_string().size() / 16);
  }

  void emit(const Value& v) {
    append_str(out_, v);
    check_output();
  }

  void emit(const std::string& s) {
    out_.append(s);
    check_output();
  }

  void check_output() {
    if (out_.size() > limits_.max_output_bytes) {
      limit_error("rendered text exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
    }
  }

  // Renders `body` into a string of its own (macro calls, block assignments).
  std::string capture(const Body& body) {
    std::string saved = std::move(out_);
    out_.clear();
    exec(body);
    std::string captured = std::move(out_);
    out_ = std::move(saved);
    return captured;
  }

  // ---- statements -------------------------------------------------------------------------

  Flow exec(const Body& body) {
    for (const auto& stmt : body) {
      const Flow flow = exec(*stmt);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& s) {
    charge(1);
    line_ = s.line;
    switch (s.kind) {
      case Stmt::Kind::kText:
        emit(s.text);
        return Flow::kNormal;
      case Stmt::Kind::kOutput:
        emit(s.expr->folds ? eval_folded(*s.expr, true) : eval(*s.expr));
        return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (const auto& [test, body] : s.branches) {
          if (truthy(eval(*test))) return exec(body);
        }
        return exec(s.else_body);
      case Stmt::Kind::kFor:
        return exec_for(s);
      case Stmt::Kind::kSet:
        assign(s.target, eval(*s.expr));
        return Flow::kNormal;
      case Stmt::Kind::kSetBlock: {
        std::string captured;
        {
          Scope scope(*this, false);
          captured = capture(s.body);
        }
        assign(s.target, Value::string(std::move(captured)));
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro: {
        Callable c;
        c.kind = Callable::Kind::kMacro;
        c.macro = &s;
        c.name = s.name;
        store(s.name, Value::callable(std::move(c)));
        return Flow::kNormal;
      }
      case Stmt::Kind::kWith: {
        std::vector<Value> values;
        for (const ExprPtr& e : s.defaults) values.push_back(eval(*e));
        Scope scope(*this, false);
        for (size_t i = 0; i < values.size(); ++i) store(s.params[i], values[i]);
        return exec(s.body);
      }
      case Stmt::Kind::kScope: {
        Scope scope(*this, false);
        return exec(s.body);
      }
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  Flow exec_for(const Stmt& s) {
    std::vector<Value> items = iterate(eval(*s.expr));
    if (s.filter) {
      // `for x in xs if cond`: the loop (and loop.*) sees only the items that pass.
      std::vector<Value> kept;
      Scope scope(*this, false);
      for (Value& item : items) {
        charge(1);
        frames_.back().clear();
        assign(s.target, item);
        if (truthy(eval(*s.filter))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec(s.else_body);
    auto state = std::make_shared<LoopState>();
    state->items = std::make_shared<const std::vector<Value>>(std::move(items));
    const Value loop = Value::loop(state);
    Scope scope(*this, false);
    for (size_t i = 0; i < state->items->size(); ++i) {
      charge(1);
      state->index0 = static_cast<int64_t>(i);
      frames_.back().clear();
      store("loop", loop);
      assign(s.target, (*state->items)[i]);
      if (exec(s.body) == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  // ---- expressions ------------------------------------------------------------------------

  Args eval_args(const Expr& e, size_t first) {
    Args args;
    for (size_t i = first; i < e.children.size(); ++i)
      args.positional.push_back(eval(*e.children[i]));
    for (const Keyword& k : e.keywords) args.keywords.emplace_back(k.name, eval(*k.value));
    return args;
  }

  Value call(const Value& callee, const Args& args) {
    if (callee.is_undefined()) fail_undefined(callee);
    if (!callee.is_callable()) runtime_error("'" + type_name(callee) + "' object is not callable");
    const Callable& c = callee.as_callable();
    switch (c.kind) {
      case Callable::Kind::kGlobal:
        return call_global(c.id, args, ctx_);
      case Callable::Kind::kMethod:
        return call_method(c, args, ctx_);
      case Callable::Kind::kMacro:
        return call_macro(*static_cast<const Stmt*>(c.macro), args);
    }
    runtime_error("not callable");
  }

  Value call_macro(const Stmt& m, const Args& args) {
    if (call_depth_ >= limits_.max_call_depth) {
      limit_error("macro calls nested deeper than " + std::to_string(limits_.max_call_depth));
    }
    if (args.positional.size() > m.params.size()) {
      runtime_error("macro '" + m.name + "' takes not more than " +
                    std::to_string(m.params.size()) + " argument(s)");
    }
    std::vector<const Value*> bound(m.params.size(), nullptr);
    for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = &args.positional[i];
    for (const auto& [key, value] : args.keywords) {
      size_t i = 0;
      while (i < m.params.size() && m.params[i] != key) ++i;
      if (i == m.params.size()) {
        runtime_error("macro '" + m.name + "' takes no keyword argument '" + key + "'");
      }
      if (bound[i] != nullptr) {
        runtime_error("macro '" + m.name + "' got multiple values for argument '" + key + "'");
      }
      bound[i] = &value;
    }
    ++call_depth_;
    struct Depth {
      int& d;
      ~Depth() { --d; }
    } depth{call_depth_};
    Scope scope(*this, true);
    for (size_t i = 0; i < m.params.size(); ++i) {
      if (bound[i] != nullptr) {
        store(m.params[i], *bound[i]);
      } else if (m.defaults[i]) {
        store(m.params[i], eval(*m.defaults[i]));
      } else {
        store(m.params[i], Value::undefined("parameter '" + m.params[i] + "' was not provided"));
      }
    }
    return Value::string(capture(m.body));
  }

  // jinja2's constant folding (Node.as_const): evaluation that gives up (Impossible) on
  // names, calls and filters that need the context, and on any error.
  struct Impossible {};

  // What jinja2 does when it compiles: it evaluates an expression it can fold then (slices
  // lenient) and keeps the value if it can be written into Python code (for a whole {{ }}, if
  // it can be printed); otherwise the expression is evaluated at render time.
  Value eval_folded(const Expr& e, bool whole_output) {
    folding_ = true;
    try {
      Value v = eval_node(e);
      folding_ = false;
      if (whole_output || has_safe_repr(v, 0)) return v;
    } catch (const Impossible&) {
      folding_ = false;
    } catch (const TemplateError& err) {
      folding_ = false;
      if (err.kind() == TemplateError::Kind::kLimit) throw;
    }
    return eval_node(e);
  }

  // jinja2's has_safe_repr: what its optimizer may turn into a constant.
  static bool has_safe_repr(const Value& v, int depth) {
    if (depth > kMaxValueDepth) return false;
    switch (v.kind()) {
      case Value::Kind::kNone:
      case Value::Kind::kBool:
      case Value::Kind::kInt:
      case Value::Kind::kFloat:
      case Value::Kind::kString:
        return true;
      case Value::Kind::kList:
        if (!v.is_list_or_tuple()) return false;
        for (const Value& item : v.as_list().items) {
          if (!has_safe_repr(item, depth + 1)) return false;
        }
        return true;
      case Value::Kind::kDict:
        for (const auto& [k, item] : v.as_dict().items()) {
          if (!has_safe_repr(k, depth + 1) || !has_safe_repr(item, depth + 1)) return false;
        }
        return true;
      default:
        return false;
    }
  }

  Value eval(const Expr& e) { return e.folds && !folding_ ? eval_folded(e, false) : eval_node(e); }

  Value eval_node(const Expr& e) {
    charge(1);
    line_ = e.line;
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.value;
      case Expr::Kind::kName:
        if (folding_) throw Impossible{};
        return lookup(e.name);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        std::vector<Value> items;
        items.reserve(e.children.size());
        for (const ExprPtr& c : e.children) items.push_back(eval(*c));
        return e.kind == Expr::Kind::kList ? Value::list(std::move(items))
                                           : Value::tuple(std::move(items));
      }
      case Expr::Kind::kDict: {
        DictData d;
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          Value key = eval(*e.children[i]);
          d.set(std::move(key), eval(*e.children[i + 1]));
        }
        return Value::dict(std::move(d));
      }
      case Expr::Kind::kGetAttr:
        return get_attribute(eval(*e.children[0]), e.name, e.builtin);
      case Expr::Kind::kGetItem: {
        const Value obj = eval(*e.children[0]);
        const Expr& index = *e.children[1];
        if (index.kind != Expr::Kind::kSlice) return get_item(obj, eval(index));
        Value parts[3];
        const Value* bounds[3] = {nullptr, nullptr, nullptr};
        for (size_t i = 0; i < 3; ++i) {
          if (index.children[i]) {
            parts[i] = eval(*index.children[i]);
            bounds[i] = &parts[i];
          }
        }
        const bool sliceable =
            obj.is_string() || obj.is_undefined() ||
            (obj.is_list() && (obj.is_list_or_tuple() || obj.seq() == Seq::kRange));
        if (!sliceable && folding_) {
          return Value::undefined("'" + type_name(obj) + " object' has no element slice");
        }
        Value result = get_slice(obj, bounds[0], bounds[1], bounds[2]);
        charge_built(result);
        return result;
      }
      case Expr::Kind::kCall: {
        if (folding_) throw Impossible{};
        const Value callee = eval(*e.children[0]);
        const Args args = eval_args(e, 1);
        line_ = e.line;
        Value result = call(callee, args);
        charge_built(result);
        return result;
      }
      case Expr::Kind::kFilter: {
        if (folding_ && filter_needs_context(e.builtin)) throw Impossible{};
        const Value input = eval(*e.children[0]);
        const Args args = eval_args(e, 1);
        line_ = e.line;
        Value result = apply_filter(e.builtin, input, args, ctx_);
        charge_built(result);
        return result;
      }
      case Expr::Kind::kTest: {
        const Value input = eval(*e.children[0]);
        const Args args = eval_args(e, 1);
        line_ = e.line;
        return Value::boolean(apply_test(e.builtin, input, args, ctx_));
      }
      case Expr::Kind::kNot:
        return Value::boolean(!truthy(eval(*e.children[0])));
      case Expr::Kind::kNeg:
        return negate(eval(*e.children[0]));
      case Expr::Kind::kPos:
        return positive(eval(*e.children[0]));
      case Expr::Kind::kBinary: {
        const Value a = eval(*e.children[0]);
        const Value b = eval(*e.children[1]);
        line_ = e.line;
        Value result = binary(e.binary_op, a, b, limits_.max_output_bytes);
        charge_built(result);
        return result;
      }
      case Expr::Kind::kConcat: {
        std::vector<Value> parts;
        parts.reserve(e.children.size());
        for (const ExprPtr& c : e.children) parts.push_back(eval(*c));
        Value result = concat(parts, limits_.max_output_bytes);
        charge_built(result);
        return result;
      }
      case Expr::Kind::kCompare: {
        Value left = eval(*e.children[0]);
        for (size_t i = 0; i < e.compare_ops.size(); ++i) {
          Value right = eval(*e.children[i + 1]);
          line_ = e.line;
          if (!compare(e.compare_ops[i], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Expr::Kind::kAnd: {
        Value left = eval(*e.children[0]);
        return truthy(left) ? eval(*e.children[1]) : left;
      }
      case Expr::Kind::kOr: {
        Value left = eval(*e.children[0]);
        return truthy(left) ? left : eval(*e.children[1]);
      }
      case Expr::Kind::kCondition:
        if (truthy(eval(*e.children[0]))) return eval(*e.children[1]);
        if (e.children[2]) return eval(*e.children[2]);
        if (folding_) throw Impossible{};
        return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                " evaluated to false and no else section was defined.");
      case Expr::Kind::kSlice:
        break;
    }
    runtime_error("unexpected expression");
  }

  const DictData& variables_;
  const RenderLimits limits_;
  const BuiltinContext ctx_;
  std::vector<Frame> frames_;
  size_t floor_ = 0;
  std::string out_;
  uint64_t work_ = 0;
  int call_depth_ = 0;
  int line_ = 0;
  bool folding_ = false;
};

}  // namespace

std::string render_program(const Program& program, const DictData& variables,
                           const RenderOptions& options) {
  return Interpreter(variables, options).run(program);
}

}  // namespace hearth::jinja
