#include "gateway/jinja/builtins.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "gateway/jinja/error.h"
#include "gateway/jinja/operators.h"
#include "gateway/jinja/text.h"

namespace hearth::jinja {
namespace {

// ---- name tables --------------------------------------------------------------------------

enum Filter {
  kFAbs,
  kFAttr,
  kFCapitalize,
  kFCount,
  kFDefault,
  kFDictsort,
  kFFirst,
  kFFloat,
  kFIndent,
  kFInt,
  kFItems,
  kFJoin,
  kFLast,
  kFLength,
  kFList,
  kFLower,
  kFMap,
  kFMax,
  kFMin,
  kFReject,
  kFRejectattr,
  kFReplace,
  kFReverse,
  kFRound,
  kFSelect,
  kFSelectattr,
  kFSort,
  kFString,
  kFSum,
  kFTitle,
  kFTojson,
  kFTrim,
  kFUnique,
  kFUpper,
  kFWordcount,
};

constexpr std::pair<std::string_view, int> kFilters[] = {
    {"abs", kFAbs},
    {"attr", kFAttr},
    {"capitalize", kFCapitalize},
    {"count", kFCount},
    {"d", kFDefault},
    {"default", kFDefault},
    {"dictsort", kFDictsort},
    {"first", kFFirst},
    {"float", kFFloat},
    {"indent", kFIndent},
    {"int", kFInt},
    {"items", kFItems},
    {"join", kFJoin},
    {"last", kFLast},
    {"length", kFLength},
    {"list", kFList},
    {"lower", kFLower},
    {"map", kFMap},
    {"max", kFMax},
    {"min", kFMin},
    {"reject", kFReject},
    {"rejectattr", kFRejectattr},
    {"replace", kFReplace},
    {"reverse", kFReverse},
    {"round", kFRound},
    {"select", kFSelect},
    {"selectattr", kFSelectattr},
    {"sort", kFSort},
    {"string", kFString},
    {"sum", kFSum},
    {"title", kFTitle},
    {"tojson", kFTojson},
    {"trim", kFTrim},
    {"unique", kFUnique},
    {"upper", kFUpper},
    {"wordcount", kFWordcount},
};

enum Test {
  kTDefined,
  kTUndefined,
  kTNone,
  kTBoolean,
  kTFalse,
  kTTrue,
  kTInteger,
  kTFloat,
  kTNumber,
  kTString,
  kTMapping,
  kTSequence,
  kTIterable,
  kTCallable,
  kTLower,
  kTUpper,
  kTOdd,
  kTEven,
  kTDivisibleBy,
  kTEq,
  kTNe,
  kTLt,
  kTLe,
  kTGt,
  kTGe,
  kTIn,
  kTSameAs,
  kTEscaped,
};

constexpr std::pair<std::string_view, int> kTests[] = {
    {"defined", kTDefined},
    {"undefined", kTUndefined},
    {"none", kTNone},
    {"boolean", kTBoolean},
    {"false", kTFalse},
    {"true", kTTrue},
    {"integer", kTInteger},
    {"float", kTFloat},
    {"number", kTNumber},
    {"string", kTString},
    {"mapping", kTMapping},
    {"sequence", kTSequence},
    {"iterable", kTIterable},
    {"callable", kTCallable},
    {"lower", kTLower},
    {"upper", kTUpper},
    {"odd", kTOdd},
    {"even", kTEven},
    {"divisibleby", kTDivisibleBy},
    {"eq", kTEq},
    {"equalto", kTEq},
    {"==", kTEq},
    {"ne", kTNe},
    {"!=", kTNe},
    {"lt", kTLt},
    {"lessthan", kTLt},
    {"<", kTLt},
    {"le", kTLe},
    {"<=", kTLe},
    {"gt", kTGt},
    {"greaterthan", kTGt},
    {">", kTGt},
    {"ge", kTGe},
    {">=", kTGe},
    {"in", kTIn},
    {"sameas", kTSameAs},
    {"escaped", kTEscaped},
};

enum Global { kGRange, kGDict, kGNamespace, kGRaiseException, kGStrftimeNow };

constexpr std::pair<std::string_view, int> kGlobals[] = {
    {"range", kGRange},
    {"dict", kGDict},
    {"namespace", kGNamespace},
    {"raise_exception", kGRaiseException},
    {"strftime_now", kGStrftimeNow},
};

enum Method {
  // str
  kMStartswith,
  kMEndswith,
  kMSplit,
  kMRsplit,
  kMStrip,
  kMLstrip,
  kMRstrip,
  kMUpper,
  kMLower,
  kMTitle,
  kMCapitalize,
  kMReplace,
  kMFind,
  kMRfind,
  kMJoin,
  kMSplitlines,
  kMIsdigit,
  kMIsalpha,
  kMIsalnum,
  kMIsspace,
  kMIslower,
  kMIsupper,
  // str, list, tuple
  kMCount,
  kMIndex,
  // dict
  kMGet,
  kMItems,
  kMKeys,
  kMValues,
  // loop
  kMCycle,
};

constexpr std::pair<std::string_view, int> kMethods[] = {
    {"startswith", kMStartswith},
    {"endswith", kMEndswith},
    {"split", kMSplit},
    {"rsplit", kMRsplit},
    {"strip", kMStrip},
    {"lstrip", kMLstrip},
    {"rstrip", kMRstrip},
    {"upper", kMUpper},
    {"lower", kMLower},
    {"title", kMTitle},
    {"capitalize", kMCapitalize},
    {"replace", kMReplace},
    {"find", kMFind},
    {"rfind", kMRfind},
    {"join", kMJoin},
    {"splitlines", kMSplitlines},
    {"isdigit", kMIsdigit},
    {"isalpha", kMIsalpha},
    {"isalnum", kMIsalnum},
    {"isspace", kMIsspace},
    {"islower", kMIslower},
    {"isupper", kMIsupper},
    {"count", kMCount},
    {"index", kMIndex},
    {"get", kMGet},
    {"items", kMItems},
    {"keys", kMKeys},
    {"values", kMValues},
    {"cycle", kMCycle},
};

template <size_t N>
int find_in(const std::pair<std::string_view, int> (&table)[N], std::string_view name) {
  for (const auto& [n, id] : table) {
    if (n == name) return id;
  }
  return -1;
}

bool is_str_method(int id) {
  return id <= kMIndex;
}
bool is_sequence_method(int id) {
  return id == kMCount || id == kMIndex;
}
bool is_dict_method(int id) {
  return id >= kMGet && id <= kMValues;
}

// The attribute names the immutable sandbox refuses (they would mutate their object).
constexpr std::string_view kMutators[] = {"append",     "extend",  "insert", "pop",
                                          "remove",     "clear",   "sort",   "update",
                                          "setdefault", "popitem", "reverse"};

bool is_mutator(std::string_view name) {
  return std::find(std::begin(kMutators), std::end(kMutators), name) != std::end(kMutators);
}

// ---- argument binding ---------------------------------------------------------------------

// Binds Python-style arguments to the named parameters of `fn`: positional first, then
// keywords. Returns one pointer per parameter (null when not given).
std::vector<const Value*> bind(std::string_view fn, const Args& args,
                               std::initializer_list<std::string_view> names, size_t required = 0) {
  std::vector<const Value*> out(names.size(), nullptr);
  if (args.positional.size() > names.size()) {
    runtime_error(std::string(fn) + "() takes at most " + std::to_string(names.size()) +
                  " argument(s) (" + std::to_string(args.positional.size()) + " given)");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = &args.positional[i];
  for (const auto& [key, value] : args.keywords) {
    const auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) {
      runtime_error(std::string(fn) + "() got an unexpected keyword argument '" + key + "'");
    }
    const auto index = static_cast<size_t>(it - names.begin());
    if (out[index] != nullptr) {
      runtime_error(std::string(fn) + "() got multiple values for argument '" + key + "'");
    }
    out[index] = &value;
  }
  for (size_t i = 0; i < required; ++i) {
    if (out[i] == nullptr) {
      runtime_error(std::string(fn) + "() missing required argument '" +
                    std::string(*(names.begin() + i)) + "'");
    }
  }
  return out;
}

bool flag(const Value* v, bool fallback) {
  return v == nullptr ? fallback : truthy(*v);
}

int64_t integer_arg(std::string_view fn, const Value* v, int64_t fallback) {
  if (v == nullptr || v->is_none()) return fallback;
  if (!v->is_int() && !v->is_bool()) {
    runtime_error(std::string(fn) + "(): an integer is required, not '" + type_name(*v) + "'");
  }
  return v->as_int();
}

const std::string& string_arg(std::string_view fn, const Value& v) {
  if (!v.is_string()) {
    runtime_error(std::string(fn) + "() argument must be str, not " + type_name(v));
  }
  return v.as_string();
}

void check_string_size(size_t bytes, const BuiltinContext& ctx) {
  if (bytes > ctx.max_string_bytes) {
    limit_error("a string would exceed " + std::to_string(ctx.max_string_bytes) + " bytes");
  }
}

// ---- attribute lookup helpers -------------------------------------------------------------

Value undefined_attribute(const Value& obj, std::string_view name) {
  std::string owner = obj.is_none() ? "None" : "'" + type_name(obj) + " object'";
  if (obj.is_none()) return Value::undefined("'None' has no attribute '" + std::string(name) + "'");
  return Value::undefined(owner + " has no attribute '" + std::string(name) + "'");
}

Value loop_attribute(const LoopState& s, std::string_view name) {
  const auto length = static_cast<int64_t>(s.items->size());
  if (name == "index") return Value::integer(s.index0 + 1);
  if (name == "index0") return Value::integer(s.index0);
  if (name == "revindex") return Value::integer(length - s.index0);
  if (name == "revindex0") return Value::integer(length - s.index0 - 1);
  if (name == "first") return Value::boolean(s.index0 == 0);
  if (name == "last") return Value::boolean(s.index0 == length - 1);
  if (name == "length") return Value::integer(length);
  if (name == "depth") return Value::integer(s.depth0 + 1);
  if (name == "depth0") return Value::integer(s.depth0);
  if (name == "previtem") {
    return s.index0 > 0 ? (*s.items)[static_cast<size_t>(s.index0 - 1)]
                        : Value::undefined("there is no previous item");
  }
  if (name == "nextitem") {
    return s.index0 + 1 < length ? (*s.items)[static_cast<size_t>(s.index0 + 1)]
                                 : Value::undefined("there is no next item");
  }
  return Value::undefined("'LoopContext object' has no attribute '" + std::string(name) + "'");
}

bool has_method(const Value& receiver, int id) {
  return (receiver.is_string() && is_str_method(id)) ||
         (receiver.is_list() && (receiver.is_list_or_tuple() || receiver.seq() == Seq::kRange) &&
          is_sequence_method(id)) ||
         (receiver.is_dict() && is_dict_method(id)) || (receiver.is_loop() && id == kMCycle);
}

Value bound_method(const Value& receiver, int id, std::string_view name) {
  Callable c;
  c.kind = Callable::Kind::kMethod;
  c.id = id;
  c.receiver = receiver;
  c.name = std::string(name);
  return Value::callable(std::move(c));
}

Value unsafe_attribute(const Value& obj, std::string_view name) {
  return Value::undefined("access to attribute '" + std::string(name) + "' of '" + type_name(obj) +
                          "' object is unsafe.");
}

// getattr(obj, name) alone, without the item fallback (the `attr` filter).
Value plain_attribute(const Value& obj, std::string_view name, int attribute_class) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (!name.empty() && name[0] == '_') return unsafe_attribute(obj, name);
  if (obj.is_namespace()) {
    if (const Value* v = obj.as_namespace().attributes.find(name)) return *v;
    return undefined_attribute(obj, name);
  }
  if (attribute_class >= 0 && has_method(obj, attribute_class)) {
    return bound_method(obj, attribute_class, name);
  }
  if (obj.is_loop()) return loop_attribute(obj.as_loop(), name);
  if ((obj.is_list() || obj.is_dict()) && attribute_class == kMutatorAttribute) {
    return unsafe_attribute(obj, name);
  }
  return undefined_attribute(obj, name);
}

// Python's index normalisation for obj[i].
bool normalize_index(int64_t& i, int64_t size) {
  if (i < 0) i += size;
  return i >= 0 && i < size;
}

// jinja2's make_attrgetter: "a.b.0" looks up item by item (getitem semantics).
Value lookup_path(const Value& obj, const std::string& path) {
  Value cur = obj;
  for (const std::string& part : text::split(path, ".", -1)) {
    int64_t index = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), index);
    const bool numeric = ec == std::errc() && end == part.data() + part.size() && !part.empty();
    cur = get_item(cur, numeric ? Value::integer(index) : Value::string(part));
  }
  return cur;
}

Value attribute_of(const Value& item, const Value* attribute, const Value* fallback) {
  if (attribute == nullptr || attribute->is_none()) return item;
  Value v = attribute->is_int() ? get_item(item, *attribute)
                                : lookup_path(item, string_arg("attribute", *attribute));
  if (v.is_undefined() && fallback != nullptr) return *fallback;
  return v;
}

// Sort key for case-insensitive filters: strings lowered, everything else as is.
Value fold_case(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value::string(text::lower(v.as_string())) : v;
}

Value make_list(std::vector<Value> items) {
  return Value::list(std::move(items));
}

// jinja2's map, select, unique, items, ... are generators: they yield one-shot iterators and
// fail only when consumed. `body` fills the items; a runtime error it raises is deferred.
template <typename Body>
Value generator(Body body) {
  std::vector<Value> out;
  try {
    body(out);
  } catch (const TemplateError& e) {
    if (e.kind() != TemplateError::Kind::kRuntime) throw;
    return Value::iterator(std::move(out), "generator", e.message());
  }
  return Value::iterator(std::move(out), "generator");
}

// ---- filters ------------------------------------------------------------------------------

Value filter_default(const Value& in, const Args& args) {
  const auto a = bind("default", args, {"default_value", "boolean"});
  const Value fallback = a[0] != nullptr ? *a[0] : Value::string("");
  if (in.is_undefined() || (flag(a[1], false) && !truthy(in))) return fallback;
  return in;
}

Value filter_first_last(const Value& in, bool first) {
  if (in.is_iterator()) {
    if (!first) runtime_error("'" + type_name(in) + "' object is not reversible");
    const Value* v = in.as_iterator().take_one();
    return v != nullptr ? *v : Value::undefined("No first item, sequence was empty.");
  }
  std::vector<Value> items = iterate(in);
  if (items.empty()) {
    return Value::undefined(first ? "No first item, sequence was empty."
                                  : "No last item, sequence was empty.");
  }
  return first ? items.front() : items.back();
}

Value filter_join(const Value& in, const Args& args, const BuiltinContext& ctx) {
  const auto a = bind("join", args, {"d", "attribute"});
  const std::string sep = a[0] != nullptr ? to_str(*a[0]) : "";
  std::string out;
  bool first = true;
  for (const Value& item : iterate(in)) {
    if (!first) out.append(sep);
    first = false;
    append_str(out, attribute_of(item, a[1], nullptr));
    check_string_size(out.size(), ctx);
  }
  return Value::string(std::move(out));
}

Value filter_tojson(const Value& in, const Args& args) {
  // transformers' override: tojson(x, ensure_ascii=False, indent=None, separators=None,
  // sort_keys=False) calling json.dumps.
  const auto a = bind("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = flag(a[0], false);
  if (a[1] != nullptr && !a[1]->is_none()) {
    o.has_indent = true;
    if (a[1]->is_string()) {
      o.indent = a[1]->as_string();
    } else {
      const int64_t n = integer_arg("tojson", a[1], 0);
      o.indent.assign(static_cast<size_t>(std::clamp<int64_t>(n, 0, 64)), ' ');
    }
    o.item_separator = ",";
  }
  if (a[2] != nullptr && !a[2]->is_none()) {
    if (!a[2]->is_list() || a[2]->as_list().items.size() != 2) {
      runtime_error("tojson(): separators must be a (item_separator, key_separator) pair");
    }
    o.item_separator = string_arg("tojson", a[2]->as_list().items[0]);
    o.key_separator = string_arg("tojson", a[2]->as_list().items[1]);
  }
  o.sort_keys = flag(a[3], false);
  return Value::string(to_json(in, o));
}

Value filter_map(const Value& in, const Args& args, const BuiltinContext& ctx) {
  return generator([&](std::vector<Value>& out) {
    if (!truthy(in)) return;  // jinja2: "if value:" before iterating
    if (args.positional.empty()) {
      // map(attribute='x', default=...)
      const auto a = bind("map", args, {"attribute", "default"});
      if (a[0] == nullptr) runtime_error("map() needs a filter name or attribute=");
      for (const Value& item : iterate(in)) out.push_back(attribute_of(item, a[0], a[1]));
      return;
    }
    const std::string& name = string_arg("map", args.positional[0]);
    const int id = find_filter(name);
    if (id < 0) runtime_error("map(): filter '" + name + "' is not supported");
    Args rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keywords = args.keywords;
    for (const Value& item : iterate(in)) out.push_back(apply_filter(id, item, rest, ctx));
  });
}

// select / reject / selectattr / rejectattr.
Value filter_select(const Value& in, const Args& args, bool by_attribute, bool keep,
                    const BuiltinContext& ctx) {
  return generator([&](std::vector<Value>& out) {
    if (!truthy(in)) return;  // jinja2: "if value:" before iterating
    size_t next = 0;
    Value attribute;
    if (by_attribute) {
      if (args.positional.empty()) runtime_error("selectattr()/rejectattr() need an attribute");
      attribute = args.positional[next++];
    }
    int test = -1;
    if (next < args.positional.size()) {
      const std::string& name = string_arg("select", args.positional[next++]);
      test = find_test(name);
      if (test < 0) runtime_error("test '" + name + "' is not supported");
    }
    Args test_args;
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next),
                                args.positional.end());
    test_args.keywords = args.keywords;
    for (const Value& item : iterate(in)) {
      const Value subject = by_attribute ? attribute_of(item, &attribute, nullptr) : item;
      const bool pass = test < 0 ? truthy(subject) : apply_test(test, subject, test_args, ctx);
      if (pass == keep) out.push_back(item);
    }
  });
}

std::vector<Value> sorted_items(std::vector<Value> items, bool reverse, bool case_sensitive,
                                const Value* attribute) {
  std::vector<std::pair<Value, size_t>> keys;
  keys.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    keys.emplace_back(fold_case(attribute_of(items[i], attribute, nullptr), case_sensitive), i);
  }
  std::stable_sort(keys.begin(), keys.end(), [&](const auto& x, const auto& y) {
    return reverse ? less(y.first, x.first) : less(x.first, y.first);
  });
  std::vector<Value> out;
  out.reserve(items.size());
  for (const auto& k : keys) out.push_back(items[k.second]);
  return out;
}

Value filter_min_max(const Value& in, const Args& args, bool max) {
  const auto a = bind(max ? "max" : "min", args, {"case_sensitive", "attribute"});
  std::vector<Value> items = iterate(in);
  if (items.empty())
    return Value::undefined(std::string("No aggregated item, sequence was empty."));
  const bool cs = flag(a[0], false);
  size_t best = 0;
  Value best_key = fold_case(attribute_of(items[0], a[1], nullptr), cs);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = fold_case(attribute_of(items[i], a[1], nullptr), cs);
    if (max ? less(best_key, key) : less(key, best_key)) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

Value filter_unique(const Value& in, const Args& args) {
  return generator([&](std::vector<Value>& out) {
    const auto a = bind("unique", args, {"case_sensitive", "attribute"});
    const bool cs = flag(a[0], false);
    std::vector<Value> seen;
    for (const Value& item : iterate(in)) {
      Value key = fold_case(attribute_of(item, a[1], nullptr), cs);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) {
        seen.push_back(std::move(key));
        out.push_back(item);
      }
    }
  });
}

Value filter_dictsort(const Value& in, const Args& args) {
  const auto a = bind("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!in.is_dict()) runtime_error("dictsort(): can only sort a mapping");
  const bool by_value = a[1] != nullptr && to_str(*a[1]) == "value";
  if (a[1] != nullptr && !by_value && to_str(*a[1]) != "key") {
    runtime_error("dictsort(): you can only sort by either \"key\" or \"value\"");
  }
  std::vector<Value> pairs;
  for (const auto& [k, v] : in.as_dict().items()) pairs.push_back(Value::tuple({k, v}));
  const Value index = Value::integer(by_value ? 1 : 0);
  return make_list(sorted_items(std::move(pairs), flag(a[2], false), flag(a[0], false), &index));
}

Value filter_indent(const Value& in, const Args& args) {
  const auto a = bind("indent", args, {"width", "first", "blank"});
  // jinja2 appends "\n" to the value itself, so only strings work.
  if (in.is_undefined()) fail_undefined(in);
  if (!in.is_string()) {
    runtime_error("unsupported operand type(s) for +=: '" + type_name(in) + "' and 'str'");
  }
  std::string unit;
  if (a[0] != nullptr && a[0]->is_string()) {
    unit = a[0]->as_string();
  } else {
    unit.assign(static_cast<size_t>(std::clamp<int64_t>(integer_arg("indent", a[0], 4), 0, 256)),
                ' ');
  }
  const std::string s = to_str(in) + "\n";
  std::vector<std::string> lines = text::splitlines(s);
  std::string out;
  if (flag(a[2], false)) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out.append("\n" + unit);
      out.append(lines[i]);
    }
  } else {
    out = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out.push_back('\n');
      if (!lines[i].empty()) out.append(unit);
      out.append(lines[i]);
    }
  }
  if (flag(a[1], false)) out = unit + out;
  return Value::string(std::move(out));
}

// Python float(str): surrounding whitespace, underscores between digits, inf/nan.
bool parse_python_float(std::string s, double* out) {
  s = text::strip(s, nullptr, true, true);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() &&
        std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      continue;
    }
    clean.push_back(s[i]);
  }
  const std::string lower = text::lower(clean);
  const bool negative = !lower.empty() && lower[0] == '-';
  const std::string body =
      !lower.empty() && (lower[0] == '-' || lower[0] == '+') ? lower.substr(1) : lower;
  if (body == "inf" || body == "infinity") {
    *out = negative ? -INFINITY : INFINITY;
    return true;
  }
  if (body == "nan") {
    *out = NAN;
    return true;
  }
  const char* begin = clean.data() + (!clean.empty() && clean[0] == '+' ? 1 : 0);
  const auto [end, ec] = std::from_chars(begin, clean.data() + clean.size(), *out);
  return ec == std::errc() && end == clean.data() + clean.size() && !body.empty();
}

Value filter_int(const Value& in, const Args& args) {
  const auto a = bind("int", args, {"default", "base"});
  const Value fallback = a[0] != nullptr ? *a[0] : Value::integer(0);
  const int64_t base = integer_arg("int", a[1], 10);
  if (in.is_undefined()) fail_undefined(in);  // int(Undefined) raises, it is no TypeError
  if (in.is_int() || in.is_bool()) return Value::integer(in.as_int());
  if (in.is_float()) {
    const double f = std::trunc(in.as_float());
    if (!std::isfinite(f) || f >= 9.2e18 || f <= -9.2e18) return fallback;
    return Value::integer(static_cast<int64_t>(f));
  }
  if (in.is_string()) {
    std::string s = text::strip(in.as_string(), nullptr, true, true);
    bool negative = false;
    if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
      negative = s[0] == '-';
      s.erase(0, 1);
    }
    int b = static_cast<int>(base);
    if (s.size() > 2 && s[0] == '0') {
      const char p = static_cast<char>(s[1] | 0x20);
      const int prefixed = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
      if (prefixed != 0 && (b == prefixed || b == 0)) {
        b = prefixed;
        s.erase(0, 2);
      }
    }
    if (b == 0) b = 10;
    std::string digits;
    for (char c : s) {
      if (c != '_') digits.push_back(c);
    }
    int64_t value = 0;
    const auto [end, ec] =
        b >= 2 && b <= 36 ? std::from_chars(digits.data(), digits.data() + digits.size(), value, b)
                          : std::from_chars_result{digits.data(), std::errc::invalid_argument};
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty()) {
      return Value::integer(negative ? -value : value);
    }
    double f = 0;
    if (parse_python_float(in.as_string(), &f) && std::isfinite(f) && std::fabs(f) < 9.2e18) {
      return Value::integer(static_cast<int64_t>(std::trunc(f)));
    }
  }
  return fallback;
}

Value filter_float(const Value& in, const Args& args) {
  const auto a = bind("float", args, {"default"});
  const Value fallback = a[0] != nullptr ? *a[0] : Value::floating(0.0);
  if (in.is_undefined()) fail_undefined(in);
  if (in.is_number()) return Value::floating(in.as_float());
  double f = 0;
  if (in.is_string() && parse_python_float(in.as_string(), &f)) return Value::floating(f);
  return fallback;
}

// Python's round(x, n) for floats: correctly rounded through the decimal representation.
double round_decimal(double x, int64_t digits) {
  if (!std::isfinite(x)) return x;
  if (digits > 300) return x;
  if (digits < 0) {
    const double scale = std::pow(10.0, static_cast<double>(-digits));
    return std::nearbyint(x / scale) * scale;
  }
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(digits), x);
  return std::strtod(buf, nullptr);
}

Value filter_round(const Value& in, const Args& args) {
  const auto a = bind("round", args, {"precision", "method"});
  const int64_t precision = integer_arg("round", a[0], 0);
  const std::string method = a[1] != nullptr ? to_str(*a[1]) : "common";
  if (method != "common" && method != "ceil" && method != "floor") {
    runtime_error("round(): method must be 'common', 'ceil' or 'floor'");
  }
  if (!in.is_number()) runtime_error("type " + type_name(in) + " doesn't define __round__ method");
  if (method == "common") {
    if (!in.is_float()) return Value::integer(in.as_int());
    return Value::floating(round_decimal(in.as_float(), precision));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = in.as_float() * scale;
  return Value::floating((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

Value filter_sum(const Value& in, const Args& args, const BuiltinContext& ctx) {
  const auto a = bind("sum", args, {"attribute", "start"});
  Value total = a[1] != nullptr ? *a[1] : Value::integer(0);
  for (const Value& item : iterate(in)) {
    total = binary(BinaryOp::kAdd, total, attribute_of(item, a[0], nullptr), ctx.max_string_bytes);
  }
  return total;
}

Value filter_reverse(const Value& in) {
  if (in.is_list() || in.is_dict() || in.is_undefined()) {
    // reversed(): an iterator named after what it reverses.
    std::vector<Value> items = iterate(in);
    std::reverse(items.begin(), items.end());
    const char* type = "reversed";
    if (in.is_dict()) {
      type = "dict_reversekeyiterator";
    } else if (in.is_list()) {
      switch (in.seq()) {
        case Seq::kList:
          type = "list_reverseiterator";
          break;
        case Seq::kTuple:
          type = "reversed";
          break;
        case Seq::kRange:
          type = "range_iterator";
          break;
        case Seq::kDictKeys:
          type = "dict_reversekeyiterator";
          break;
        case Seq::kDictValues:
          type = "dict_reversevalueiterator";
          break;
        case Seq::kDictItems:
          type = "dict_reverseitemiterator";
          break;
      }
    }
    return Value::iterator(std::move(items), type);
  }
  if (!in.is_string() && !in.is_iterator()) runtime_error("argument must be iterable");
  if (in.is_string()) {
    std::vector<char32_t> cps = text::code_points(in.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value::string(text::from_code_points(cps.data(), cps.data() + cps.size()));
  }
  std::vector<Value> items = iterate(in);
  std::reverse(items.begin(), items.end());
  return make_list(std::move(items));
}

// jinja2's title filter: words begin after runs of '-', whitespace and opening brackets.
std::string jinja_title(const std::string& s) {
  std::string out;
  bool begin = true;
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    const char32_t cp = text::decode(s, i);
    const std::string_view one = std::string_view(s).substr(at, i - at);
    const bool sep =
        cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || text::is_space(cp);
    out.append(sep ? std::string(one) : begin ? text::upper(one) : text::lower(one));
    begin = sep;
  }
  return out;
}

// ---- methods ------------------------------------------------------------------------------

// Code point offsets of s[start:end] as Python's str methods take them.
std::pair<size_t, size_t> byte_range(const std::string& s, const Value* start, const Value* end) {
  if ((start == nullptr || start->is_none()) && (end == nullptr || end->is_none())) {
    return {0, s.size()};
  }
  const std::vector<char32_t> cps = text::code_points(s);
  const auto n = static_cast<int64_t>(cps.size());
  auto clamp = [&](const Value* v, int64_t fallback) {
    int64_t i = integer_arg("slice", v, fallback);
    if (i < 0) i += n;
    return std::clamp<int64_t>(i, 0, n);
  };
  const int64_t b = clamp(start, 0);
  const int64_t e = clamp(end, n);
  // Byte offsets of code point positions b and e.
  size_t byte_b = s.size();
  size_t byte_e = s.size();
  size_t pos = 0;
  for (int64_t i = 0; i <= n; ++i) {
    if (i == b) byte_b = pos;
    if (i == e) byte_e = pos;
    if (i < n) text::decode(s, pos);
  }
  return {byte_b, std::max(byte_b, byte_e)};
}

Value affix_method(const std::string& s, const Args& args, bool starts) {
  const auto a = bind(starts ? "startswith" : "endswith", args, {"prefix", "start", "end"}, 1);
  const auto [b, e] = byte_range(s, a[1], a[2]);
  const std::string_view view = std::string_view(s).substr(b, e - b);
  auto test = [&](const Value& affix) {
    const std::string& x = string_arg(starts ? "startswith" : "endswith", affix);
    return starts ? view.substr(0, x.size()) == x
                  : view.size() >= x.size() && view.substr(view.size() - x.size()) == x;
  };
  if (a[0]->is_list() && a[0]->is_tuple()) {
    for (const Value& affix : a[0]->as_list().items) {
      if (test(affix)) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  return Value::boolean(test(*a[0]));
}

Value strings_to_list(std::vector<std::string> parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (std::string& p : parts) out.push_back(Value::string(std::move(p)));
  return make_list(std::move(out));
}

Value split_method(const std::string& s, const Args& args, bool from_right) {
  const auto a = bind(from_right ? "rsplit" : "split", args, {"sep", "maxsplit"});
  const int64_t maxsplit = integer_arg("split", a[1], -1);
  if (a[0] == nullptr || a[0]->is_none()) {
    if (from_right && maxsplit >= 0) {
      throw TemplateError(TemplateError::Kind::kUnsupported, 0,
                          "rsplit() with maxsplit and no separator is not supported");
    }
    return strings_to_list(text::split_whitespace(s, maxsplit));
  }
  const std::string& sep = string_arg("split", *a[0]);
  if (sep.empty()) runtime_error("empty separator");
  return strings_to_list(from_right ? text::rsplit(s, sep, maxsplit)
                                    : text::split(s, sep, maxsplit));
}

Value find_method_call(const std::string& s, const Args& args, bool from_right, bool count) {
  const char* fn = count ? "count" : from_right ? "rfind" : "find";
  const auto a = bind(fn, args, {"sub", "start", "end"}, 1);
  const std::string& sub = string_arg(fn, *a[0]);
  const auto [b, e] = byte_range(s, a[1], a[2]);
  const std::string_view view = std::string_view(s).substr(b, e - b);
  if (count) {
    if (sub.empty()) return Value::integer(static_cast<int64_t>(text::length(view)) + 1);
    int64_t n = 0;
    for (size_t at = view.find(sub); at != std::string_view::npos;
         at = view.find(sub, at + sub.size())) {
      ++n;
    }
    return Value::integer(n);
  }
  const size_t hit = from_right ? view.rfind(sub) : view.find(sub);
  if (hit == std::string_view::npos) return Value::integer(-1);
  return Value::integer(static_cast<int64_t>(text::length(std::string_view(s).substr(0, b + hit))));
}

Value str_method(int id, const std::string& s, const Args& args, const BuiltinContext& ctx) {
  auto no_args = [&](const char* fn) { bind(fn, args, {}); };
  auto predicate = [&](const char* fn, auto pred) {
    no_args(fn);
    if (s.empty()) return Value::boolean(false);
    for (size_t i = 0; i < s.size();) {
      if (!pred(text::decode(s, i))) return Value::boolean(false);
    }
    return Value::boolean(true);
  };
  auto ascii_alpha = [](char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  auto ascii_digit = [](char32_t c) { return c >= '0' && c <= '9'; };
  switch (id) {
    case kMStartswith:
      return affix_method(s, args, true);
    case kMEndswith:
      return affix_method(s, args, false);
    case kMSplit:
      return split_method(s, args, false);
    case kMRsplit:
      return split_method(s, args, true);
    case kMStrip:
    case kMLstrip:
    case kMRstrip: {
      const auto a = bind(id == kMStrip    ? "strip"
                          : id == kMLstrip ? "lstrip"
                                           : "rstrip",
                          args, {"chars"});
      const std::string* chars =
          a[0] != nullptr && !a[0]->is_none() ? &string_arg("strip", *a[0]) : nullptr;
      return Value::string(text::strip(s, chars, id != kMRstrip, id != kMLstrip));
    }
    case kMUpper:
      no_args("upper");
      return Value::string(text::upper(s));
    case kMLower:
      no_args("lower");
      return Value::string(text::lower(s));
    case kMTitle:
      no_args("title");
      return Value::string(text::title(s));
    case kMCapitalize:
      no_args("capitalize");
      return Value::string(text::capitalize(s));
    case kMReplace: {
      const auto a = bind("replace", args, {"old", "new", "count"}, 2);
      const std::string& old = string_arg("replace", *a[0]);
      const std::string& with = string_arg("replace", *a[1]);
      const int64_t count = integer_arg("replace", a[2], -1);
      // Bound the result before building it.
      if (with.size() > old.size()) {
        const size_t hits = old.empty() ? text::length(s) + 1 : [&] {
          size_t n = 0;
          for (size_t at = s.find(old); at != std::string::npos; at = s.find(old, at + old.size()))
            ++n;
          return n;
        }();
        check_string_size(s.size() + hits * (with.size() - old.size()), ctx);
      }
      return Value::string(text::replace(s, old, with, count));
    }
    case kMFind:
      return find_method_call(s, args, false, false);
    case kMRfind:
      return find_method_call(s, args, true, false);
    case kMCount:
      return find_method_call(s, args, false, true);
    case kMJoin: {
      const auto a = bind("join", args, {"iterable"}, 1);
      std::string out;
      size_t i = 0;
      for (const Value& item : iterate(*a[0])) {
        if (!item.is_string()) {
          runtime_error("sequence item " + std::to_string(i) + ": expected str instance, " +
                        type_name(item) + " found");
        }
        if (i++ > 0) out.append(s);
        out.append(item.as_string());
        check_string_size(out.size(), ctx);
      }
      return Value::string(std::move(out));
    }
    case kMSplitlines:
      no_args("splitlines");
      return strings_to_list(text::splitlines(s));
    case kMIsdigit:
      return predicate("isdigit", ascii_digit);
    case kMIsalpha:
      return predicate("isalpha", ascii_alpha);
    case kMIsalnum:
      return predicate("isalnum", [&](char32_t c) { return ascii_alpha(c) || ascii_digit(c); });
    case kMIsspace:
      return predicate("isspace", text::is_space);
    case kMIslower:
      no_args("islower");
      return Value::boolean(text::is_lower(s));
    case kMIsupper:
      no_args("isupper");
      return Value::boolean(text::is_upper(s));
    case kMIndex: {
      const Value pos = find_method_call(s, args, false, false);
      if (pos.as_int() < 0) runtime_error("substring not found");
      return pos;
    }
    default:
      break;
  }
  runtime_error("'str object' has no such method");
}

Value sequence_method(int id, const ListData& list, const Args& args) {
  const auto a = bind(id == kMCount ? "count" : "index", args, {"value"}, 1);
  int64_t count = 0;
  for (size_t i = 0; i < list.items.size(); ++i) {
    if (!equal(list.items[i], *a[0])) continue;
    if (id == kMIndex) return Value::integer(static_cast<int64_t>(i));
    ++count;
  }
  if (id == kMIndex) runtime_error(repr(*a[0]) + " is not in list");
  return Value::integer(count);
}

Value dict_method(int id, const DictData& d, const Args& args) {
  switch (id) {
    case kMGet: {
      const auto a = bind("get", args, {"key", "default"}, 1);
      const Value* v = d.find(*a[0]);
      return v != nullptr ? *v : a[1] != nullptr ? *a[1] : Value::none();
    }
    case kMItems:
    case kMKeys:
    case kMValues: {
      bind(id == kMItems ? "items" : id == kMKeys ? "keys" : "values", args, {});
      std::vector<Value> out;
      out.reserve(d.size());
      for (const auto& [k, v] : d.items()) {
        out.push_back(id == kMItems ? Value::tuple({k, v}) : id == kMKeys ? k : v);
      }
      return Value::sequence(std::move(out), id == kMItems  ? Seq::kDictItems
                                             : id == kMKeys ? Seq::kDictKeys
                                                            : Seq::kDictValues);
    }
    default:
      break;
  }
  runtime_error("'dict object' has no such method");
}

// ---- tests --------------------------------------------------------------------------------

bool numeric_mod_is(const Value& v, int64_t divisor, int64_t remainder) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number())
    runtime_error("unsupported operand type(s) for %: '" + type_name(v) + "' and 'int'");
  const Value m = binary(BinaryOp::kMod, v, Value::integer(divisor), 0);
  return equal(m, Value::integer(remainder));
}

// ---- globals ------------------------------------------------------------------------------

constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox MAX_RANGE

Value global_range(const Args& args) {
  if (!args.keywords.empty()) runtime_error("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) runtime_error("range expected 1 to 3 arguments");
  for (const Value& v : p) {
    if (!v.is_int() && !v.is_bool()) {
      runtime_error("'" + type_name(v) + "' object cannot be interpreted as an integer");
    }
  }
  const int64_t start = p.size() == 1 ? 0 : p[0].as_int();
  const int64_t stop = p.size() == 1 ? p[0].as_int() : p[1].as_int();
  const int64_t step = p.size() == 3 ? p[2].as_int() : 1;
  if (step == 0) runtime_error("range() arg 3 must not be zero");
  const long double span =
      step > 0 ? static_cast<long double>(stop) - start : static_cast<long double>(start) - stop;
  const long double count =
      span <= 0 ? 0 : std::ceil(span / std::fabs(static_cast<long double>(step)));
  if (count > kMaxRange) {
    runtime_error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  return Value::range(start, stop, step);
}

Value global_strftime_now(const Args& args, const BuiltinContext& ctx) {
  const auto a = bind("strftime_now", args, {"format"}, 1);
  const std::string& format = string_arg("strftime_now", *a[0]);
  if (format.empty()) return Value::string("");
  if (format.size() > 256) runtime_error("strftime_now(): format longer than 256 bytes");
  std::string buf(format.size() * 32 + 64, '\0');
  const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &ctx.now);
  buf.resize(n);
  return Value::string(std::move(buf));
}

}  // namespace

// ---- public entry points ------------------------------------------------------------------

int find_filter(std::string_view name) {
  return find_in(kFilters, name);
}
int find_test(std::string_view name) {
  return find_in(kTests, name);
}
int find_global(std::string_view name) {
  return find_in(kGlobals, name);
}
int find_method(std::string_view name) {
  return find_in(kMethods, name);
}

bool filter_needs_context(int id) {
  return id == kFMap || id == kFSelect || id == kFReject || id == kFSelectattr ||
         id == kFRejectattr;
}

std::string method_refusal(std::string_view name) {
  if (is_mutator(name)) {
    return "method '" + std::string(name) +
           "' is not allowed: transformers renders chat templates in jinja2's immutable "
           "sandbox, which forbids changing lists and dicts";
  }
  return "method '" + std::string(name) + "' is not supported";
}

int classify_attribute(std::string_view name) {
  const int id = find_method(name);
  if (id >= 0) return id;
  return is_mutator(name) ? kMutatorAttribute : kPlainAttribute;
}

Value get_attribute(const Value& obj, std::string_view name, int attribute_class) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    // Attributes of the dict type come first (d.items is the method), then keys.
    if (attribute_class >= 0 && has_method(obj, attribute_class)) {
      return bound_method(obj, attribute_class, name);
    }
    if (attribute_class == kMutatorAttribute) return unsafe_attribute(obj, name);
    if (const Value* v = obj.as_dict().find(name)) return *v;
    return undefined_attribute(obj, name);
  }
  return plain_attribute(obj, name, attribute_class);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  switch (obj.kind()) {
    case Value::Kind::kDict:
      if (key.is_list() || key.is_dict()) break;
      if (const Value* v = obj.as_dict().find(key)) return *v;
      break;
    case Value::Kind::kList:
      if ((key.is_int() || key.is_bool()) && (obj.is_list_or_tuple() || obj.seq() == Seq::kRange)) {
        int64_t i = key.as_int();
        const auto& items = obj.as_list().items;
        if (normalize_index(i, static_cast<int64_t>(items.size())))
          return items[static_cast<size_t>(i)];
      }
      break;
    case Value::Kind::kString:
      if (key.is_int() || key.is_bool()) {
        int64_t i = key.as_int();
        const std::string& s = obj.as_string();
        if (text::is_ascii(s)) {
          if (normalize_index(i, static_cast<int64_t>(s.size()))) {
            return Value::string(std::string(1, s[static_cast<size_t>(i)]));
          }
        } else {
          const std::vector<char32_t> cps = text::code_points(s);
          if (normalize_index(i, static_cast<int64_t>(cps.size()))) {
            const char32_t* p = cps.data() + i;
            return Value::string(text::from_code_points(p, p + 1));
          }
        }
      }
      break;
    default:
      break;
  }
  if (key.is_string()) {
    const int attribute_class = classify_attribute(key.as_string());
    if (obj.is_dict()) {
      if (attribute_class >= 0 && has_method(obj, attribute_class)) {
        return bound_method(obj, attribute_class, key.as_string());
      }
      return undefined_attribute(obj, key.as_string());
    }
    return plain_attribute(obj, key.as_string(), attribute_class);
  }
  if (obj.is_none()) return Value::undefined("'None' has no element " + repr(key));
  return Value::undefined("'" + type_name(obj) + " object' has no element " + repr(key));
}

Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  // jinja2 slices with Python's own obj[a:b:c], not environment.getitem: errors are errors.
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) runtime_error("unhashable type: 'slice'");
  if (!obj.is_string() &&
      !(obj.is_list() && (obj.is_list_or_tuple() || obj.seq() == Seq::kRange))) {
    runtime_error("'" + type_name(obj) + "' object is not subscriptable");
  }
  auto index = [](const Value* v) -> const Value* {
    if (v == nullptr || v->is_none()) return nullptr;
    if (!v->is_int() && !v->is_bool()) {
      runtime_error("slice indices must be integers or None or have an __index__ method");
    }
    return v;
  };
  start = index(start);
  stop = index(stop);
  step = index(step);
  const int64_t st = step != nullptr ? step->as_int() : 1;
  if (st == 0) runtime_error("slice step cannot be zero");

  const bool ascii = obj.is_string() && text::is_ascii(obj.as_string());
  std::vector<char32_t> cps;
  if (obj.is_string() && !ascii) cps = text::code_points(obj.as_string());
  const auto n = static_cast<int64_t>(obj.is_list() ? obj.as_list().items.size()
                                      : ascii       ? obj.as_string().size()
                                                    : cps.size());
  // Python's slice.indices().
  auto bound = [&](const Value* v, int64_t fallback) {
    if (v == nullptr) return fallback;
    int64_t i = v->as_int();
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  const int64_t b = bound(start, st < 0 ? n - 1 : 0);
  const int64_t e = bound(stop, st < 0 ? -1 : n);
  std::vector<int64_t> picks;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) picks.push_back(i);

  if (obj.is_list()) {
    const ListData& l = obj.as_list();
    if (l.seq == Seq::kRange) {
      return Value::range(l.range_start + b * l.range_step, l.range_start + e * l.range_step,
                          l.range_step * st);
    }
    std::vector<Value> out;
    out.reserve(picks.size());
    for (int64_t i : picks) out.push_back(l.items[static_cast<size_t>(i)]);
    return Value::sequence(std::move(out), l.seq);
  }
  std::string out;
  if (ascii) {
    const std::string& s = obj.as_string();
    if (st == 1)
      return Value::string(b < e ? s.substr(static_cast<size_t>(b), static_cast<size_t>(e - b))
                                 : "");
    for (int64_t i : picks) out.push_back(s[static_cast<size_t>(i)]);
  } else {
    for (int64_t i : picks) text::append_utf8(out, cps[static_cast<size_t>(i)]);
  }
  return Value::string(std::move(out));
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.as_list().items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.as_dict().size());
      for (const auto& [k, val] : v.as_dict().items()) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      const std::string& s = v.as_string();
      std::vector<Value> out;
      out.reserve(s.size());
      for (size_t i = 0; i < s.size();) {
        const size_t at = i;
        text::decode(s, i);
        out.push_back(Value::string(s.substr(at, i - at)));
      }
      return out;
    }
    case Value::Kind::kLoop:
      return *v.as_loop().items;
    case Value::Kind::kIterator:
      return v.as_iterator().take_all();
    default:
      runtime_error("'" + type_name(v) + "' object is not iterable");
  }
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(text::length(v.as_string()));
    case Value::Kind::kList:
      return static_cast<int64_t>(v.as_list().items.size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.as_dict().size());
    case Value::Kind::kLoop:
      return static_cast<int64_t>(v.as_loop().items->size());
    default:
      runtime_error("object of type '" + type_name(v) + "' has no len()");
  }
}

Value apply_filter(int id, const Value& in, const Args& args, const BuiltinContext& ctx) {
  auto no_args = [&](const char* fn) { bind(fn, args, {}); };
  switch (static_cast<Filter>(id)) {
    case kFAbs:
      no_args("abs");
      if (in.is_float()) return Value::floating(std::fabs(in.as_float()));
      if (!in.is_number()) runtime_error("bad operand type for abs(): '" + type_name(in) + "'");
      return in.as_int() < 0 ? negate(in) : Value::integer(in.as_int());
    case kFAttr: {
      const auto a = bind("attr", args, {"name"}, 1);
      const std::string& name = string_arg("attr", *a[0]);
      return plain_attribute(in, name, classify_attribute(name));
    }
    case kFCapitalize:
      no_args("capitalize");
      return Value::string(text::capitalize(to_str(in)));
    case kFCount:
    case kFLength:
      no_args("length");
      return Value::integer(length_of(in));
    case kFDefault:
      return filter_default(in, args);
    case kFDictsort:
      return filter_dictsort(in, args);
    case kFFirst:
      no_args("first");
      return filter_first_last(in, true);
    case kFLast:
      no_args("last");
      return filter_first_last(in, false);
    case kFFloat:
      return filter_float(in, args);
    case kFIndent:
      return filter_indent(in, args);
    case kFInt:
      return filter_int(in, args);
    case kFItems:
      no_args("items");
      return generator([&](std::vector<Value>& out) {
        if (in.is_undefined()) return;
        if (!in.is_dict()) runtime_error("Can only get item pairs from a mapping.");
        for (const auto& [k, v] : in.as_dict().items()) out.push_back(Value::tuple({k, v}));
      });
    case kFJoin:
      return filter_join(in, args, ctx);
    case kFList:
      no_args("list");
      return make_list(iterate(in));
    case kFLower:
      no_args("lower");
      return Value::string(text::lower(to_str(in)));
    case kFUpper:
      no_args("upper");
      return Value::string(text::upper(to_str(in)));
    case kFTitle:
      no_args("title");
      return Value::string(jinja_title(to_str(in)));
    case kFMap:
      return filter_map(in, args, ctx);
    case kFMax:
      return filter_min_max(in, args, true);
    case kFMin:
      return filter_min_max(in, args, false);
    case kFSelect:
      return filter_select(in, args, false, true, ctx);
    case kFReject:
      return filter_select(in, args, false, false, ctx);
    case kFSelectattr:
      return filter_select(in, args, true, true, ctx);
    case kFRejectattr:
      return filter_select(in, args, true, false, ctx);
    case kFReplace: {
      const auto a = bind("replace", args, {"old", "new", "count"}, 2);
      Args method_args;
      method_args.positional = {Value::string(to_str(*a[0])), Value::string(to_str(*a[1]))};
      if (a[2] != nullptr && !a[2]->is_none()) method_args.positional.push_back(*a[2]);
      return str_method(kMReplace, to_str(in), method_args, ctx);
    }
    case kFReverse:
      no_args("reverse");
      return filter_reverse(in);
    case kFRound:
      return filter_round(in, args);
    case kFSort: {
      const auto a = bind("sort", args, {"reverse", "case_sensitive", "attribute"});
      return make_list(sorted_items(iterate(in), flag(a[0], false), flag(a[1], false), a[2]));
    }
    case kFString:
      no_args("string");
      return in.is_string() ? in : Value::string(to_str(in));
    case kFSum:
      return filter_sum(in, args, ctx);
    case kFTojson:
      return filter_tojson(in, args);
    case kFTrim: {
      const auto a = bind("trim", args, {"chars"});
      const std::string* chars =
          a[0] != nullptr && !a[0]->is_none() ? &string_arg("trim", *a[0]) : nullptr;
      return Value::string(text::strip(to_str(in), chars, true, true));
    }
    case kFUnique:
      return filter_unique(in, args);
    case kFWordcount: {
      // len(re.findall(r"\w+", str(s))): runs of word characters.
      no_args("wordcount");
      const std::string s = to_str(in);
      int64_t words = 0;
      bool in_word = false;
      for (size_t i = 0; i < s.size();) {
        const bool word = text::is_word(text::decode(s, i));
        words += word && !in_word;
        in_word = word;
      }
      return Value::integer(words);
    }
  }
  runtime_error("unknown filter");
}

bool apply_test(int id, const Value& v, const Args& args, const BuiltinContext& ctx) {
  (void)ctx;
  auto no_args = [&](const char* fn) { bind(fn, args, {}); };
  auto other = [&](const char* fn) { return *bind(fn, args, {"other"}, 1)[0]; };
  switch (static_cast<Test>(id)) {
    case kTDefined:
      no_args("defined");
      return !v.is_undefined();
    case kTUndefined:
      no_args("undefined");
      return v.is_undefined();
    case kTNone:
      no_args("none");
      return v.is_none();
    case kTBoolean:
      no_args("boolean");
      return v.is_bool();
    case kTFalse:
      no_args("false");
      return v.is_bool() && !v.as_bool();
    case kTTrue:
      no_args("true");
      return v.is_bool() && v.as_bool();
    case kTInteger:
      no_args("integer");
      return v.is_int();
    case kTFloat:
      no_args("float");
      return v.is_float();
    case kTNumber:
      no_args("number");
      return v.is_number();
    case kTString:
      no_args("string");
      return v.is_string();
    case kTMapping:
      no_args("mapping");
      return v.is_dict();
    case kTSequence:
      no_args("sequence");
      return v.is_string() || v.is_dict() || v.is_undefined() ||
             (v.is_list() && (v.is_list_or_tuple() || v.seq() == Seq::kRange));
    case kTIterable:
      no_args("iterable");
      return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined() || v.is_loop() ||
             v.is_iterator();
    case kTCallable:
      no_args("callable");
      return v.is_callable() || v.is_undefined();
    case kTLower:
      no_args("lower");
      return text::is_lower(to_str(v));
    case kTUpper:
      no_args("upper");
      return text::is_upper(to_str(v));
    case kTOdd:
      no_args("odd");
      return numeric_mod_is(v, 2, 1);
    case kTEven:
      no_args("even");
      return numeric_mod_is(v, 2, 0);
    case kTDivisibleBy: {
      const Value& n = *bind("divisibleby", args, {"num"}, 1)[0];
      if (v.is_undefined()) fail_undefined(v);
      return equal(binary(BinaryOp::kMod, v, n, 0), Value::integer(0));
    }
    case kTEq:
      return compare(CompareOp::kEq, v, other("eq"));
    case kTNe:
      return compare(CompareOp::kNe, v, other("ne"));
    case kTLt:
      return compare(CompareOp::kLt, v, other("lt"));
    case kTLe:
      return compare(CompareOp::kLe, v, other("le"));
    case kTGt:
      return compare(CompareOp::kGt, v, other("gt"));
    case kTGe:
      return compare(CompareOp::kGe, v, other("ge"));
    case kTIn:
      return contains(*bind("in", args, {"seq"}, 1)[0], v);
    case kTSameAs: {
      const Value o = other("sameas");
      if (v.kind() != o.kind()) return false;
      if (v.is_none() || v.is_undefined()) return true;
      if (v.is_bool()) return v.as_bool() == o.as_bool();
      // CPython caches small ints; larger equal ints are distinct objects.
      if (v.is_int()) return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
      if (v.is_float()) return false;
      return v.identity() == o.identity();
    }
    case kTEscaped:
      no_args("escaped");
      return false;
  }
  runtime_error("unknown test");
}

Value call_global(int id, const Args& args, const BuiltinContext& ctx) {
  switch (static_cast<Global>(id)) {
    case kGRange:
      return global_range(args);
    case kGDict:
    case kGNamespace: {
      if (args.positional.size() > 1) runtime_error("dict expected at most 1 argument");
      DictData d;
      if (!args.positional.empty()) {
        const Value& init = args.positional[0];
        if (init.is_dict()) {
          for (const auto& [k, v] : init.as_dict().items()) d.set(k, v);
        } else {
          for (const Value& pair : iterate(init)) {
            const std::vector<Value> kv = iterate(pair);
            if (kv.size() != 2)
              runtime_error("dictionary update sequence element has wrong length");
            d.set(kv[0], kv[1]);
          }
        }
      }
      for (const auto& [k, v] : args.keywords) d.set(Value::string(k), v);
      if (id == kGDict) return Value::dict(std::move(d));
      Value ns = Value::namespace_object();
      for (const auto& [k, v] : d.items()) {
        if (v.is_namespace() || v.is_loop()) {
          runtime_error("a namespace cannot hold a namespace or a loop object");
        }
        ns.as_namespace().attributes.set(k, v);
      }
      return ns;
    }
    case kGRaiseException: {
      const auto a = bind("raise_exception", args, {"message"}, 1);
      throw TemplateError(TemplateError::Kind::kRaised, 0, to_str(*a[0]));
    }
    case kGStrftimeNow:
      return global_strftime_now(args, ctx);
  }
  runtime_error("unknown function");
}

Value call_method(const Callable& m, const Args& args, const BuiltinContext& ctx) {
  const Value& r = m.receiver;
  if (r.is_string()) return str_method(m.id, r.as_string(), args, ctx);
  if (r.is_list()) return sequence_method(m.id, r.as_list(), args);
  if (r.is_dict()) return dict_method(m.id, r.as_dict(), args);
  if (r.is_loop() && m.id == kMCycle) {
    if (!args.keywords.empty()) runtime_error("cycle() takes no keyword arguments");
    if (args.positional.empty()) runtime_error("no items for cycling given");
    const LoopState& s = r.as_loop();
    return args.positional[static_cast<size_t>(s.index0) % args.positional.size()];
  }
  runtime_error("'" + type_name(r) + " object' has no method '" + m.name + "'");
}

}  // namespace hearth::jinja
