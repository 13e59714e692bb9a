#include "gateway/jinja/operators.h"

#include <cmath>
#include <string>

#include "gateway/jinja/error.h"

namespace hearth::jinja {
namespace {

const char* symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "+";
    case BinaryOp::kSub:
      return "-";
    case BinaryOp::kMul:
      return "*";
    case BinaryOp::kDiv:
      return "/";
    case BinaryOp::kFloorDiv:
      return "//";
    case BinaryOp::kMod:
      return "%";
    case BinaryOp::kPow:
      return "** or pow()";
  }
  return "?";
}

[[noreturn]] void unsupported_operands(BinaryOp op, const Value& a, const Value& b) {
  runtime_error(std::string("unsupported operand type(s) for ") + symbol(op) + ": '" +
                type_name(a) + "' and '" + type_name(b) + "'");
}

[[noreturn]] void overflow() {
  runtime_error("integer overflow: hearth's templates compute with 64-bit integers");
}

void check_size(size_t bytes, size_t max_bytes) {
  if (bytes > max_bytes) {
    limit_error("a string or list would exceed " + std::to_string(max_bytes) + " bytes");
  }
}

Value repeat(const Value& seq, int64_t times, size_t max_bytes) {
  if (times <= 0) return seq.is_string() ? Value::string("") : Value::sequence({}, seq.seq());
  const auto n = static_cast<uint64_t>(times);
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && n > max_bytes / s.size()) check_size(max_bytes + 1, max_bytes);
    std::string out;
    out.reserve(s.size() * n);
    for (uint64_t i = 0; i < n; ++i) out.append(s);
    return Value::string(std::move(out));
  }
  const auto& items = seq.as_list().items;
  if (!items.empty() && n > max_bytes / (items.size() * sizeof(Value))) {
    check_size(max_bytes + 1, max_bytes);
  }
  std::vector<Value> out;
  out.reserve(items.size() * n);
  for (uint64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::sequence(std::move(out), seq.seq());
}

double python_fmod(double x, double y) {
  double m = std::fmod(x, y);
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  if (m == 0) m = std::copysign(0.0, y);
  return m;
}

// CPython's float floor division (float_divmod): exact where floor(x / y) would round.
double python_floor_div(double x, double y) {
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return std::copysign(0.0, x / y);
  double floordiv = std::floor(div);
  if (div - floordiv > 0.5) floordiv += 1.0;
  return floordiv;
}

Value arithmetic(BinaryOp op, const Value& a, const Value& b) {
  const bool ints = !a.is_float() && !b.is_float();
  if (op == BinaryOp::kDiv) {
    if (b.as_float() == 0) runtime_error("division by zero");
    return Value::floating(a.as_float() / b.as_float());
  }
  if (ints) {
    const int64_t x = a.as_int();
    const int64_t y = b.as_int();
    int64_t r = 0;
    switch (op) {
      case BinaryOp::kAdd:
        if (__builtin_add_overflow(x, y, &r)) overflow();
        return Value::integer(r);
      case BinaryOp::kSub:
        if (__builtin_sub_overflow(x, y, &r)) overflow();
        return Value::integer(r);
      case BinaryOp::kMul:
        if (__builtin_mul_overflow(x, y, &r)) overflow();
        return Value::integer(r);
      case BinaryOp::kFloorDiv:
      case BinaryOp::kMod: {
        if (y == 0) runtime_error("integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) overflow();
        int64_t q = x / y;
        int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        return Value::integer(op == BinaryOp::kFloorDiv ? q : m);
      }
      case BinaryOp::kPow: {
        if (y < 0) return Value::floating(std::pow(static_cast<double>(x), static_cast<double>(y)));
        int64_t result = 1;
        int64_t base = x;
        for (int64_t e = y; e > 0; e >>= 1) {
          if ((e & 1) && __builtin_mul_overflow(result, base, &result)) overflow();
          if (e > 1 && __builtin_mul_overflow(base, base, &base)) overflow();
        }
        return Value::integer(result);
      }
      default:
        break;
    }
  }
  const double x = a.as_float();
  const double y = b.as_float();
  switch (op) {
    case BinaryOp::kAdd:
      return Value::floating(x + y);
    case BinaryOp::kSub:
      return Value::floating(x - y);
    case BinaryOp::kMul:
      return Value::floating(x * y);
    case BinaryOp::kFloorDiv:
      if (y == 0) runtime_error("float floor division by zero");
      return Value::floating(python_floor_div(x, y));
    case BinaryOp::kMod:
      if (y == 0) runtime_error("float modulo");
      return Value::floating(python_fmod(x, y));
    case BinaryOp::kPow:
      if (x == 0 && y < 0) runtime_error("0.0 cannot be raised to a negative power");
      return Value::floating(std::pow(x, y));
    default:
      break;
  }
  unsupported_operands(op, a, b);
}

}  // namespace

// str % args. Only the case without conversion specifiers is implemented: Python then returns
// the string when args is empty or looks like a mapping (anything subscriptable but a tuple or
// a string, Undefined included) and raises otherwise.
Value format_without_specifiers(const Value& a, const Value& b) {
  if (a.as_string().find('%') != std::string::npos) {
    throw TemplateError(TemplateError::Kind::kUnsupported, 0,
                        "printf-style string formatting ('...' % value) is not supported");
  }
  const bool mapping_like = b.is_dict() || b.is_undefined() || b.is_namespace() ||
                            (b.is_list() && b.seq() != Seq::kTuple && b.seq() != Seq::kDictKeys &&
                             b.seq() != Seq::kDictValues && b.seq() != Seq::kDictItems);
  const bool empty_tuple = b.is_tuple() && b.as_list().items.empty();
  if (!mapping_like && !empty_tuple) {
    runtime_error("not all arguments converted during string formatting");
  }
  return a;
}

Value binary(BinaryOp op, const Value& a, const Value& b, size_t max_bytes) {
  if (op == BinaryOp::kMod && a.is_string()) return format_without_specifiers(a, b);
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) return arithmetic(op, a, b);
  if (op == BinaryOp::kAdd) {
    if (a.is_string() && b.is_string()) {
      check_size(a.as_string().size() + b.as_string().size(), max_bytes);
      std::string out;
      out.reserve(a.as_string().size() + b.as_string().size());
      out.append(a.as_string()).append(b.as_string());
      return Value::string(std::move(out));
    }
    if (a.is_list_or_tuple() && b.is_list_or_tuple() && a.seq() == b.seq()) {
      const auto& x = a.as_list().items;
      const auto& y = b.as_list().items;
      check_size((x.size() + y.size()) * sizeof(Value), max_bytes);
      std::vector<Value> out(x);
      out.insert(out.end(), y.begin(), y.end());
      return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    if (a.is_string()) {
      runtime_error("can only concatenate str (not \"" + type_name(b) + "\") to str");
    }
    if (a.is_list_or_tuple()) {
      runtime_error("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " +
                    type_name(a));
    }
  }
  if (op == BinaryOp::kMul) {
    if ((a.is_string() || a.is_list_or_tuple()) && (b.is_int() || b.is_bool())) {
      return repeat(a, b.as_int(), max_bytes);
    }
    if ((b.is_string() || b.is_list_or_tuple()) && (a.is_int() || a.is_bool())) {
      return repeat(b, a.as_int(), max_bytes);
    }
  }

  unsupported_operands(op, a, b);
}

Value negate(const Value& a) {
  if (a.is_undefined()) fail_undefined(a);
  if (a.is_float()) return Value::floating(-a.as_float());
  if (a.is_int() || a.is_bool()) {
    if (a.as_int() == INT64_MIN) overflow();
    return Value::integer(-a.as_int());
  }
  runtime_error("bad operand type for unary -: '" + type_name(a) + "'");
}

Value positive(const Value& a) {
  if (a.is_undefined()) fail_undefined(a);
  if (a.is_float()) return a;
  if (a.is_int() || a.is_bool()) return Value::integer(a.as_int());
  runtime_error("bad operand type for unary +: '" + type_name(a) + "'");
}

Value concat(const std::vector<Value>& parts, size_t max_bytes) {
  std::string out;
  for (const Value& p : parts) {
    append_str(out, p);
    check_size(out.size(), max_bytes);
  }
  return Value::string(std::move(out));
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        runtime_error("'in <string>' requires string as left operand, not " + type_name(item));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.as_list().items) {
        if (equal(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return container.as_dict().find(item) != nullptr;
    case Value::Kind::kIterator:
      // Python consumes the iterator up to the first match.
      while (const Value* v = container.as_iterator().take_one()) {
        if (equal(*v, item)) return true;
      }
      return false;
    default:
      runtime_error("argument of type '" + type_name(container) + "' is not iterable");
  }
}

bool compare(CompareOp op, const Value& a, const Value& b) {
  switch (op) {
    case CompareOp::kEq:
      return equal(a, b);
    case CompareOp::kNe:
      return !equal(a, b);
    case CompareOp::kLt:
      return less(a, b);
    case CompareOp::kGt:
      return less(b, a);
    case CompareOp::kLe:
      return less(a, b) || equal(a, b);
    case CompareOp::kGe:
      return less(b, a) || equal(a, b);
    case CompareOp::kIn:
      return contains(b, a);
    case CompareOp::kNotIn:
      return !contains(b, a);
  }
  return false;
}

}  // namespace hearth::jinja
