// Values of the Jinja subset, with the semantics Python gives them under jinja2: truthiness,
// str() and repr(), ==, ordering, and json.dumps as transformers' tojson filter calls it.
//
// Strings, lists, tuples and dicts are immutable and shared (copying a Value is cheap); the
// only mutable objects are namespace() objects, loop state and one-shot iterators (what
// jinja2's map/select/... filters return: truthy even when empty, consumed by one loop). Containers
// record their nesting depth, bounded by kMaxValueDepth, so no recursive walk (printing, comparing,
// freeing) can exhaust the stack whatever a template or a request builds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace hearth::jinja {

inline constexpr int kMaxValueDepth = 256;

class Value;
struct ListData;
class DictData;
struct NamespaceData;
struct LoopState;
struct IteratorState;
struct Callable;

// The sequence types Python tells apart: they print, compare and serialise differently.
enum class Seq : uint8_t { kList, kTuple, kDictKeys, kDictValues, kDictItems, kRange };

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,  // list, tuple, dict view or range (ListData::seq)
    kDict,
    kNamespace,
    kLoop,
    kIterator,
    kCallable,
  };

  Value() : kind_(Kind::kUndefined) {}

  // An undefined value remembers why it is undefined ("'x' is undefined", "'dict object' has
  // no attribute 'y'", or the sandbox's "access to attribute 'append' of 'list' object is
  // unsafe."); using it in a way jinja2 refuses raises that message.
  static Value undefined(std::string message);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value string(std::string s);
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);
  static Value sequence(std::vector<Value> items, Seq seq);
  // range(start, stop, step) with its items materialised (the caller bounds the length).
  static Value range(int64_t start, int64_t stop, int64_t step);
  // A one-shot iterator named like Python's ("generator", "list_reverseiterator"); `error`,
  // when set, is raised once the items before it are consumed (jinja2's lazy filters).
  static Value iterator(std::vector<Value> items, std::string type, std::string error = {});
  static Value dict(DictData data);
  static Value namespace_object();
  static Value loop(std::shared_ptr<LoopState> state);
  static Value callable(Callable c);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // Python's numbers: bool is an int.
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool is_string() const { return kind_ == Kind::kString; }
  // Any sequence (list, tuple, dict view, range); seq() tells which.
  bool is_list() const { return kind_ == Kind::kList; }
  Seq seq() const;
  // Lists and tuples: what + and ordering accept and tojson writes as arrays.
  bool is_list_or_tuple() const;
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_loop() const { return kind_ == Kind::kLoop; }
  bool is_iterator() const { return kind_ == Kind::kIterator; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return scalar_.b; }
  int64_t as_int() const { return kind_ == Kind::kBool ? int64_t{scalar_.b} : scalar_.i; }
  double as_float() const {
    return kind_ == Kind::kFloat ? scalar_.f : static_cast<double>(as_int());
  }
  const std::string& as_string() const;
  const ListData& as_list() const;
  bool is_tuple() const;
  const DictData& as_dict() const;
  NamespaceData& as_namespace() const;
  LoopState& as_loop() const;
  IteratorState& as_iterator() const;
  const Callable& as_callable() const;
  const std::string& undefined_message() const;

  // Nesting depth: 0 for scalars, 1 + the deepest element for containers.
  int depth() const;
  // Identity of the shared payload (Python `is` for containers).
  const void* identity() const { return ptr_.get(); }

 private:
  Kind kind_;
  union {
    bool b;
    int64_t i;
    double f;
  } scalar_{};
  std::shared_ptr<void> ptr_;
};

struct ListData {
  std::vector<Value> items;
  Seq seq = Seq::kList;
  int depth = 1;
  int64_t range_start = 0;  // for Seq::kRange, to print range(start, stop[, step])
  int64_t range_stop = 0;
  int64_t range_step = 1;
};

// A Python dict: insertion-ordered, keys compared as Python compares them (1 == 1.0 == True).
// Small dicts (chat messages) are searched linearly; larger ones get a hash index.
class DictData {
 public:
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  // Inserts or, for an existing key, replaces the value in place (Python's order).
  void set(Value key, Value value);
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  int depth() const { return depth_; }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  static constexpr size_t kIndexFrom = 12;
  void build_index();
  std::vector<std::pair<Value, Value>> items_;
  std::unordered_map<std::string, uint32_t, Hash, std::equal_to<>> string_keys_;
  int depth_ = 1;
};

struct NamespaceData {
  DictData attributes;
};

// The `loop` variable of a for loop (a snapshot of jinja2's LoopContext for one iteration).
struct LoopState {
  std::shared_ptr<const std::vector<Value>> items;
  int64_t index0 = 0;
  int64_t depth0 = 0;
};

struct IteratorState {
  std::vector<Value> items;
  size_t position = 0;
  std::string type;
  std::string error;
  int depth = 1;
  // The items not consumed yet, consuming them (and raising the deferred error, if any).
  std::vector<Value> take_all();
  // The next item, or nullptr at the end.
  const Value* take_one();
};

// Something a template can call: a global function, a method bound to its receiver, or a
// macro defined by the template. The ids are resolved by the parser (builtins.h).
struct Callable {
  enum class Kind { kGlobal, kMethod, kMacro };
  Kind kind = Kind::kGlobal;
  int id = 0;                   // builtins' global or method id
  Value receiver;               // for kMethod
  const void* macro = nullptr;  // for kMacro: the interpreter's macro definition
  std::string name;
};

// Python semantics.
bool truthy(const Value& v);
// str(v): "" for undefined, "None", "True", repr of floats, [..]/{..} with repr'd items.
std::string to_str(const Value& v);
void append_str(std::string& out, const Value& v);
std::string repr(const Value& v);
// Python type names as jinja2's messages spell them ('str', 'int', 'dict', 'NoneType', ...).
std::string type_name(const Value& v);
bool equal(const Value& a, const Value& b);
// a < b with Python's rules; throws a TypeError-like runtime error for unorderable types.
bool less(const Value& a, const Value& b);
// Python's repr() of a float ("1.0", "1e+16", "0.0001", "1e-05", "inf", "nan").
std::string float_repr(double f);
// Throws the undefined value's error.
[[noreturn]] void fail_undefined(const Value& v);

// JSON request data (ordered: Python's json.loads keeps key order) to values and back.
Value from_json(const nlohmann::ordered_json& j);

struct JsonOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;  // the indent unit, when has_indent
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// json.dumps(v, ...) as transformers' tojson filter calls it.
std::string to_json(const Value& v, const JsonOptions& options);

}  // namespace hearth::jinja
