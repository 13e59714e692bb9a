// The parsed template. Filters, tests, methods and global functions are resolved to builtin
// ids by the parser, so rendering never looks a name up in a table and a template that names
// something unsupported never gets this far.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gateway/jinja/value.h"

namespace hearth::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using Body = std::vector<std::unique_ptr<Stmt>>;

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Keyword {
  std::string name;
  ExprPtr value;
};

struct Expr {
  enum class Kind {
    kLiteral,   // value
    kName,      // name
    kList,      // children
    kTuple,     // children
    kDict,      // children: key, value, key, value, ...
    kGetAttr,   // children[0].name; method_id >= 0 when the attribute is called
    kGetItem,   // children[0][children[1]]
    kSlice,     // children: start, stop, step (null when omitted); only inside kGetItem
    kCall,      // children[0](children[1..], keywords)
    kFilter,    // children[0] | builtin(children[1..], keywords)
    kTest,      // children[0] is builtin(children[1..])
    kNot,       // not children[0]
    kNeg,       // -children[0]
    kPos,       // +children[0]
    kBinary,    // children[0] binary_op children[1]
    kConcat,    // children joined with ~
    kCompare,   // children[0] compare_ops[0] children[1] compare_ops[1] children[2] ...
    kAnd,       // children[0] and children[1]
    kOr,        // children[0] or children[1]
    kCondition  // children[1] if children[0] else children[2] (children[2] may be null)
  };

  Kind kind;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<Keyword> keywords;
  // Filter / test / global-function id; for kGetAttr, classify_attribute(name) (builtins.h).
  int builtin = -1;
  int depth = 1;  // of this subtree, bounded by the parser
  // A slice below. jinja2 evaluates what it can of a template when it compiles it
  // (Node.as_const: constant folding), and there slicing goes through environment.getitem, so
  // slicing what cannot be sliced gives undefined instead of an error. That is the one place
  // folding changes a result, so only these subtrees are folded (interpreter.cc).
  bool folds = false;
  bool must_name = false;  // evaluating it always evaluates a name or a call
  BinaryOp binary_op = BinaryOp::kAdd;
  std::vector<CompareOp> compare_ops;
};

// An assignment target: a name, a tuple of names (for a, b in ...), or ns.attr.
struct Target {
  enum class Kind { kName, kNames, kNamespaceAttr };
  Kind kind = Kind::kName;
  std::vector<std::string> names;  // one for kName and kNamespaceAttr (the namespace)
  std::string attribute;           // kNamespaceAttr
};

struct Stmt {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches (condition, body)..., else_body
    kFor,       // target in expr [if filter] body [else else_body]
    kSet,       // target = expr
    kSetBlock,  // {% set target %}body{% endset %}
    kMacro,     // {% macro name(params) %}body{% endmacro %}
    kWith,      // {% with targets = values %}body{% endwith %}
    kScope,     // {% generation %}body{% endgeneration %}: rendered in its own scope
    kBreak,
    kContinue,
  };

  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;  // kFor: the `if` clause
  Target target;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  // kMacro: parameter names and defaults (null when none); kWith: names and values.
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;
};

struct Program {
  Body body;
};

}  // namespace hearth::jinja
