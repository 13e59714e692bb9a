// Filters, tests, methods and global functions of the Jinja subset, with the behaviour
// jinja2 3.1 (and Python's str/dict/list methods) give them in transformers' sandboxed chat
// template environment. The parser resolves names to ids with the find_* functions; a name
// they do not know is refused when the template loads.
#pragma once

#include <ctime>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gateway/jinja/value.h"

namespace hearth::jinja {

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
};

// What builtins need from the render in progress.
struct BuiltinContext {
  size_t max_string_bytes;  // no string a builtin builds may exceed this
  std::tm now;              // the clock strftime_now reads
};

// -1 when the subset does not implement the name.
int find_filter(std::string_view name);
int find_test(std::string_view name);
int find_global(std::string_view name);
int find_method(std::string_view name);
// Filters jinja2 passes the render context (map, select, ...): never constant-folded.
bool filter_needs_context(int id);
// Why a method is missing, when there is more to say than "unsupported" (sandbox rules).
std::string method_refusal(std::string_view name);

Value apply_filter(int id, const Value& input, const Args& args, const BuiltinContext& ctx);
bool apply_test(int id, const Value& input, const Args& args, const BuiltinContext& ctx);
Value call_global(int id, const Args& args, const BuiltinContext& ctx);
Value call_method(const Callable& method, const Args& args, const BuiltinContext& ctx);

// What an attribute name can be, decided once by the parser: a method id (>= 0, see
// find_method), a method the immutable sandbox forbids (list.append, dict.pop, ...), or
// neither.
inline constexpr int kPlainAttribute = -1;
inline constexpr int kMutatorAttribute = -2;
int classify_attribute(std::string_view name);

// jinja2's sandboxed environment.getattr (obj.name: attribute first, then item) and getitem
// (obj[key]: item first, then attribute). Missing things are undefined values, not errors.
// `attribute_class` is classify_attribute(name).
Value get_attribute(const Value& obj, std::string_view name, int attribute_class);
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step]; null pointers are omitted bounds.
Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step);

// Python's iteration of a value: list/tuple items, dict keys, string characters; an undefined
// value iterates as empty. Throws for values Python cannot iterate.
std::vector<Value> iterate(const Value& v);
// Python's len().
int64_t length_of(const Value& v);

}  // namespace hearth::jinja
