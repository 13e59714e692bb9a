#include "gateway/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "base/hex_digits.h"
#include "gateway/jinja/error.h"
#include "gateway/jinja/text.h"

namespace hearth::jinja {

// ---- construction and access ------------------------------------------------------------

Value Value::undefined(std::string message) {
  Value v;
  v.kind_ = Kind::kUndefined;
  v.ptr_ = std::make_shared<std::string>(std::move(message));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.scalar_.b = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.scalar_.i = i;
  return v;
}

Value Value::floating(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.scalar_.f = f;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.ptr_ = std::make_shared<std::string>(std::move(s));
  return v;
}

namespace {

int deepest_of(const std::vector<Value>& items) {
  int deepest = 0;
  for (const Value& item : items) deepest = std::max(deepest, item.depth());
  if (deepest + 1 > kMaxValueDepth) {
    limit_error("value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  }
  return deepest;
}

}  // namespace

Value Value::sequence(std::vector<Value> items, Seq seq) {
  Value v;
  v.kind_ = Kind::kList;
  auto data = std::make_shared<ListData>();
  data->depth = deepest_of(items) + 1;
  data->items = std::move(items);
  data->seq = seq;
  v.ptr_ = std::move(data);
  return v;
}

Value Value::list(std::vector<Value> items) {
  return sequence(std::move(items), Seq::kList);
}
Value Value::tuple(std::vector<Value> items) {
  return sequence(std::move(items), Seq::kTuple);
}

Value Value::range(int64_t start, int64_t stop, int64_t step) {
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) items.push_back(integer(i));
  Value v = sequence(std::move(items), Seq::kRange);
  auto* data = static_cast<ListData*>(v.ptr_.get());
  data->range_start = start;
  data->range_stop = stop;
  data->range_step = step;
  return v;
}

Value Value::iterator(std::vector<Value> items, std::string type, std::string error) {
  Value v;
  v.kind_ = Kind::kIterator;
  auto state = std::make_shared<IteratorState>();
  state->depth = deepest_of(items) + 1;
  state->items = std::move(items);
  state->type = std::move(type);
  state->error = std::move(error);
  v.ptr_ = std::move(state);
  return v;
}

std::vector<Value> IteratorState::take_all() {
  std::vector<Value> rest(items.begin() + static_cast<std::ptrdiff_t>(position), items.end());
  position = items.size();
  if (!error.empty()) {
    std::string e = std::move(error);
    error.clear();
    runtime_error(e);
  }
  return rest;
}

const Value* IteratorState::take_one() {
  if (position < items.size()) return &items[position++];
  if (!error.empty()) {
    std::string e = std::move(error);
    error.clear();
    runtime_error(e);
  }
  return nullptr;
}

Value Value::dict(DictData data) {
  Value v;
  v.kind_ = Kind::kDict;
  v.ptr_ = std::make_shared<DictData>(std::move(data));
  return v;
}

Value Value::namespace_object() {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.ptr_ = std::make_shared<NamespaceData>();
  return v;
}

Value Value::loop(std::shared_ptr<LoopState> state) {
  Value v;
  v.kind_ = Kind::kLoop;
  v.ptr_ = std::move(state);
  return v;
}

Value Value::callable(Callable c) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.ptr_ = std::make_shared<Callable>(std::move(c));
  return v;
}

const std::string& Value::as_string() const {
  return *static_cast<const std::string*>(ptr_.get());
}
const ListData& Value::as_list() const {
  return *static_cast<const ListData*>(ptr_.get());
}
bool Value::is_tuple() const {
  return kind_ == Kind::kList && as_list().seq == Seq::kTuple;
}
Seq Value::seq() const {
  return as_list().seq;
}
bool Value::is_list_or_tuple() const {
  return kind_ == Kind::kList && (as_list().seq == Seq::kList || as_list().seq == Seq::kTuple);
}
IteratorState& Value::as_iterator() const {
  return *static_cast<IteratorState*>(ptr_.get());
}
const DictData& Value::as_dict() const {
  return *static_cast<const DictData*>(ptr_.get());
}
NamespaceData& Value::as_namespace() const {
  return *static_cast<NamespaceData*>(ptr_.get());
}
LoopState& Value::as_loop() const {
  return *static_cast<LoopState*>(ptr_.get());
}
const Callable& Value::as_callable() const {
  return *static_cast<const Callable*>(ptr_.get());
}
const std::string& Value::undefined_message() const {
  static const std::string kNone = "undefined value";
  return ptr_ ? *static_cast<const std::string*>(ptr_.get()) : kNone;
}

int Value::depth() const {
  switch (kind_) {
    case Kind::kList:
      return as_list().depth;
    case Kind::kDict:
      return as_dict().depth();
    case Kind::kNamespace:
      return 1 + as_namespace().attributes.depth();
    case Kind::kLoop:
      return 1;
    case Kind::kIterator:
      return as_iterator().depth;
    default:
      return 0;
  }
}

// ---- dict ---------------------------------------------------------------------------------

namespace {

void check_hashable(const Value& key) {
  if (key.is_list() && key.seq() != Seq::kTuple && key.seq() != Seq::kRange) {
    runtime_error("unhashable type: '" + type_name(key) + "'");
  }
  if (key.is_dict()) runtime_error("unhashable type: 'dict'");
}

}  // namespace

const Value* DictData::find(std::string_view key) const {
  if (items_.size() < kIndexFrom) {
    for (const auto& [k, v] : items_) {
      if (k.is_string() && k.as_string() == key) return &v;
    }
    return nullptr;
  }
  const auto it = string_keys_.find(key);
  return it == string_keys_.end() ? nullptr : &items_[it->second].second;
}

void DictData::build_index() {
  string_keys_.reserve(items_.size() * 2);
  for (size_t i = 0; i < items_.size(); ++i) {
    if (items_[i].first.is_string()) {
      string_keys_.emplace(items_[i].first.as_string(), static_cast<uint32_t>(i));
    }
  }
}

const Value* DictData::find(const Value& key) const {
  if (key.is_string()) return find(key.as_string());
  check_hashable(key);
  for (const auto& [k, v] : items_) {
    if (!k.is_string() && equal(k, key)) return &v;
  }
  return nullptr;
}

void DictData::set(Value key, Value value) {
  check_hashable(key);
  depth_ = std::max(depth_, 1 + value.depth());
  if (depth_ > kMaxValueDepth) {
    limit_error("value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  }
  if (key.is_string()) {
    if (Value* existing = const_cast<Value*>(find(key.as_string()))) {
      *existing = std::move(value);
      return;
    }
    if (items_.size() + 1 >= kIndexFrom) {
      if (string_keys_.empty()) build_index();
      string_keys_.emplace(key.as_string(), static_cast<uint32_t>(items_.size()));
    }
  } else {
    for (auto& [k, v] : items_) {
      if (!k.is_string() && equal(k, key)) {
        v = std::move(value);
        return;
      }
    }
  }
  items_.emplace_back(std::move(key), std::move(value));
}

// ---- str / repr ---------------------------------------------------------------------------

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  // The shortest digits that round-trip, then Python's layout: positional when the decimal
  // point falls within (-4, 16], scientific with a two-digit exponent otherwise.
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(result.ptr - buf));
  std::string out;
  if (sci.front() == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  int exponent = 0;
  std::from_chars(sci.data() + e + 1 + (sci[e + 1] == '+'), sci.data() + sci.size(), exponent);
  const int decpt = exponent + 1;
  const int n = static_cast<int>(digits.size());
  if (decpt > 16 || decpt <= -4) {
    out.push_back(digits[0]);
    if (n > 1) {
      out.push_back('.');
      out.append(digits, 1);
    }
    out.push_back('e');
    out.push_back(exponent < 0 ? '-' : '+');
    const std::string mag = std::to_string(std::abs(exponent));
    if (mag.size() < 2) out.push_back('0');
    out.append(mag);
  } else if (decpt <= 0) {
    out.append("0.");
    out.append(static_cast<size_t>(-decpt), '0');
    out.append(digits);
  } else if (decpt >= n) {
    out.append(digits);
    out.append(static_cast<size_t>(decpt - n), '0');
    out.append(".0");
  } else {
    out.append(digits, 0, static_cast<size_t>(decpt));
    out.push_back('.');
    out.append(digits, static_cast<size_t>(decpt));
  }
  return out;
}

namespace {

void append_repr(std::string& out, const Value& v);

void append_dict_body(std::string& out, const DictData& d) {
  out.push_back('{');
  bool first = true;
  for (const auto& [k, val] : d.items()) {
    if (!first) out.append(", ");
    first = false;
    append_repr(out, k);
    out.append(": ");
    append_repr(out, val);
  }
  out.push_back('}');
}

void append_container(std::string& out, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kList: {
      const ListData& l = v.as_list();
      if (l.seq == Seq::kRange) {
        out.append("range(" + std::to_string(l.range_start) + ", " + std::to_string(l.range_stop));
        if (l.range_step != 1) out.append(", " + std::to_string(l.range_step));
        out.push_back(')');
        return;
      }
      const char* open = "[";
      const char* close = "]";
      if (l.seq == Seq::kTuple) {
        open = "(";
        close = ")";
      } else if (l.seq != Seq::kList) {  // dict_keys([...]) and friends
        out.append(type_name(v));
        open = "([";
        close = "])";
      }
      out.append(open);
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i > 0) out.append(", ");
        append_repr(out, l.items[i]);
      }
      if (l.seq == Seq::kTuple && l.items.size() == 1) out.push_back(',');
      out.append(close);
      return;
    }
    case Value::Kind::kDict:
      append_dict_body(out, v.as_dict());
      return;
    case Value::Kind::kNamespace:
      out.append("<Namespace ");
      append_dict_body(out, v.as_namespace().attributes);
      out.push_back('>');
      return;
    case Value::Kind::kLoop: {
      const LoopState& s = v.as_loop();
      out.append("<LoopContext " + std::to_string(s.index0 + 1) + "/" +
                 std::to_string(s.items->size()) + ">");
      return;
    }
    case Value::Kind::kIterator:
      runtime_error("cannot print a " + type_name(v) +
                    " object (jinja2 prints its memory address); apply |list first");
    case Value::Kind::kCallable: {
      const Callable& c = v.as_callable();
      if (c.kind == Callable::Kind::kMacro) {
        out.append("<Macro " + text::py_repr(c.name) + ">");
        return;
      }
      runtime_error("cannot convert the function '" + c.name + "' to a string");
    }
    default:
      return;
  }
}

void append_repr(std::string& out, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      out.append("Undefined");
      return;
    case Value::Kind::kString:
      out.append(text::py_repr(v.as_string()));
      return;
    default:
      append_str(out, v);
      return;
  }
}

}  // namespace

void append_str(std::string& out, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return;
    case Value::Kind::kNone:
      out.append("None");
      return;
    case Value::Kind::kBool:
      out.append(v.as_bool() ? "True" : "False");
      return;
    case Value::Kind::kInt:
      out.append(std::to_string(v.as_int()));
      return;
    case Value::Kind::kFloat:
      out.append(float_repr(v.as_float()));
      return;
    case Value::Kind::kString:
      out.append(v.as_string());
      return;
    default:
      append_container(out, v);
      return;
  }
}

std::string to_str(const Value& v) {
  if (v.is_string()) return v.as_string();
  std::string out;
  append_str(out, v);
  return out;
}

std::string repr(const Value& v) {
  std::string out;
  append_repr(out, v);
  return out;
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      switch (v.seq()) {
        case Seq::kList:
          return "list";
        case Seq::kTuple:
          return "tuple";
        case Seq::kDictKeys:
          return "dict_keys";
        case Seq::kDictValues:
          return "dict_values";
        case Seq::kDictItems:
          return "dict_items";
        case Seq::kRange:
          return "range";
      }
      return "list";
    case Value::Kind::kIterator:
      return v.as_iterator().type;
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kLoop:
      return "LoopContext";
    case Value::Kind::kCallable:
      return v.as_callable().kind == Callable::Kind::kMacro ? "Macro" : "function";
  }
  return "object";
}

[[noreturn]] void fail_undefined(const Value& v) {
  runtime_error(v.undefined_message());
}

// ---- truthiness, equality, ordering -------------------------------------------------------

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.as_bool();
    case Value::Kind::kInt:
      return v.as_int() != 0;
    case Value::Kind::kFloat:
      return v.as_float() != 0.0;
    case Value::Kind::kString:
      return !v.as_string().empty();
    case Value::Kind::kList:
      return !v.as_list().items.empty();
    case Value::Kind::kDict:
      return !v.as_dict().empty();
    default:
      return true;
  }
}

namespace {

// Python compares int and float exactly, not through a rounded double.
int compare_int_float(int64_t i, double f) {
  if (std::isnan(f)) return 2;  // unordered
  if (f >= 9223372036854775808.0) return -1;
  if (f < -9223372036854775808.0) return 1;
  const double fl = std::floor(f);
  const auto fi = static_cast<int64_t>(fl);
  if (i != fi) return i < fi ? -1 : 1;
  return fl == f ? 0 : -1;  // i == floor(f) < f
}

// -1, 0, 1, or 2 for unordered (NaN).
int compare_numbers(const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float()) {
    const int64_t x = a.as_int();
    const int64_t y = b.as_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_float() && b.is_float()) {
    const double x = a.as_float();
    const double y = b.as_float();
    if (std::isnan(x) || std::isnan(y)) return 2;
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_float()) {
    const int c = compare_int_float(b.as_int(), a.as_float());
    return c == 2 ? 2 : -c;
  }
  return compare_int_float(a.as_int(), b.as_float());
}

}  // namespace

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return compare_numbers(a, b) == 0;
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const ListData& x = a.as_list();
      const ListData& y = b.as_list();
      if (x.seq != y.seq || x.items.size() != y.items.size()) return false;
      if (x.seq == Seq::kDictValues) return a.identity() == b.identity();
      if (x.seq == Seq::kDictKeys || x.seq == Seq::kDictItems) {
        // Set-like views compare as sets.
        for (const Value& item : x.items) {
          if (std::none_of(y.items.begin(), y.items.end(),
                           [&](const Value& other) { return equal(item, other); })) {
            return false;
          }
        }
        return true;
      }
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!equal(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const DictData& x = a.as_dict();
      const DictData& y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.items()) {
        const Value* other = y.find(k);
        if (other == nullptr || !equal(v, *other)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) return compare_numbers(a, b) == -1;
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list_or_tuple() && b.is_list_or_tuple() && a.seq() == b.seq()) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equal(x[i], y[i])) return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  runtime_error("'<' not supported between instances of '" + type_name(a) + "' and '" +
                type_name(b) + "'");
}

// ---- JSON ---------------------------------------------------------------------------------

namespace {

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  using J = nlohmann::ordered_json;
  if ((j.is_array() || j.is_object()) && depth >= kMaxValueDepth) {
    limit_error("JSON input nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  }
  switch (j.type()) {
    case J::value_t::null:
      return Value::none();
    case J::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case J::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case J::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) {
        runtime_error("integer " + std::to_string(u) + " is outside the supported 64-bit range");
      }
      return Value::integer(static_cast<int64_t>(u));
    }
    case J::value_t::number_float:
      return Value::floating(j.get<double>());
    case J::value_t::string:
      return Value::string(j.get<std::string>());
    case J::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_at(e, depth + 1));
      return Value::list(std::move(items));
    }
    case J::value_t::object: {
      DictData d;
      for (const auto& [k, e] : j.items()) d.set(Value::string(k), from_json_at(e, depth + 1));
      return Value::dict(std::move(d));
    }
    default:
      runtime_error("unsupported JSON value (binary data)");
  }
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  auto hex4 = [&](unsigned u) {
    out.append("\\u");
    append_hex(out, u, 4);
  };
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    const char32_t cp = text::decode(s, i);
    switch (cp) {
      case '"':
        out.append("\\\"");
        continue;
      case '\\':
        out.append("\\\\");
        continue;
      case '\n':
        out.append("\\n");
        continue;
      case '\r':
        out.append("\\r");
        continue;
      case '\t':
        out.append("\\t");
        continue;
      case '\b':
        out.append("\\b");
        continue;
      case '\f':
        out.append("\\f");
        continue;
      default:
        break;
    }
    if (cp < 0x20) {
      hex4(cp);
    } else if (ensure_ascii && cp > 0x7E) {
      if (cp >= 0x10000) {
        const char32_t v = cp - 0x10000;
        hex4(0xD800 | (v >> 10));
        hex4(0xDC00 | (v & 0x3FF));
      } else {
        hex4(cp);
      }
    } else {
      out.append(s.substr(at, i - at));
    }
  }
  out.push_back('"');
}

[[noreturn]] void not_serializable(const Value& v) {
  runtime_error("Object of type " + type_name(v) + " is not JSON serializable");
}

void append_json_number(std::string& out, const Value& v) {
  if (v.is_bool()) {
    out.append(v.as_bool() ? "true" : "false");
  } else if (v.is_int()) {
    out.append(std::to_string(v.as_int()));
  } else {
    const double f = v.as_float();
    if (std::isnan(f)) {
      out.append("NaN");
    } else if (std::isinf(f)) {
      out.append(f > 0 ? "Infinity" : "-Infinity");
    } else {
      out.append(float_repr(f));
    }
  }
}

// json.dumps turns non-string keys into strings before writing them.
std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::kString:
      return k.as_string();
    case Value::Kind::kNone:
      return "null";
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat: {
      std::string s;
      append_json_number(s, k);
      return s;
    }
    default:
      runtime_error("keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

void append_json(std::string& out, const Value& v, const JsonOptions& o, int level) {
  auto newline_indent = [&](int n) {
    out.push_back('\n');
    for (int i = 0; i < n; ++i) out.append(o.indent);
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      out.append("null");
      return;
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
      append_json_number(out, v);
      return;
    case Value::Kind::kString:
      append_json_string(out, v.as_string(), o.ensure_ascii);
      return;
    case Value::Kind::kList: {
      if (!v.is_list_or_tuple()) not_serializable(v);
      const auto& items = v.as_list().items;
      if (items.empty()) {
        out.append("[]");
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out.append(o.item_separator);
        if (o.has_indent) newline_indent(level + 1);
        append_json(out, items[i], o, level + 1);
      }
      if (o.has_indent) newline_indent(level);
      out.push_back(']');
      return;
    }
    case Value::Kind::kDict: {
      const DictData& d = v.as_dict();
      if (d.empty()) {
        out.append("{}");
        return;
      }
      std::vector<std::pair<std::string, const Value*>> items;
      items.reserve(d.size());
      for (const auto& [k, val] : d.items()) {
        if (o.sort_keys && !k.is_string()) {
          runtime_error("'<' not supported between instances of '" + type_name(k) + "' and 'str'");
        }
        items.emplace_back(json_key(k), &val);
      }
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out.push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out.append(o.item_separator);
        if (o.has_indent) newline_indent(level + 1);
        append_json_string(out, items[i].first, o.ensure_ascii);
        out.append(o.key_separator);
        append_json(out, *items[i].second, o, level + 1);
      }
      if (o.has_indent) newline_indent(level);
      out.push_back('}');
      return;
    }
    default:
      not_serializable(v);
  }
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j) {
  return from_json_at(j, 0);
}

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  append_json(out, v, options, 0);
  return out;
}

}  // namespace hearth::jinja
