#include "worker/engine/structured/json_schema_language.h"

#include <array>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "base/json_limits.h"

namespace hearth::structured {

namespace {

using json = nlohmann::ordered_json;

// Bounds beyond this are refused: decimal ranges are built digit by digit in 64 bits.
constexpr double kMaxBound = 1e15;

std::bitset<256> chars(std::string_view s) {
  std::bitset<256> b;
  for (char c : s) b.set(uint8_t(c));
  return b;
}

LangPtr digit() {
  return byte_range('0', '9');
}

// The pieces every JSON text uses, built once per compile so the automaton shares them.
struct Pieces {
  LangPtr ws = repeat(byte_set(chars(" \n\t\r")), 0, kMaxWhitespace);
  LangPtr sep = seq({ws, literal(","), ws});
  LangPtr colon = seq({ws, literal(":"), ws});
  LangPtr hex = byte_set(chars("0123456789abcdefABCDEF"));
  // \uXXXX escapes stay outside D800-DFFF: a lone surrogate is not a character.
  LangPtr u_escape =
      seq({literal("u"), alt({seq({byte_set(chars("0123456789abcefABCEF")), hex, hex, hex}),
                              seq({byte_set(chars("dD")), byte_range('0', '7'), hex, hex})})});
  LangPtr character = alt({utf8_ranges({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}}),
                           seq({literal("\\"), alt({byte_set(chars("\"\\/bfnrt")), u_escape})})});
  LangPtr any_string = string(0, -1);
  LangPtr any_integer = seq({optional(literal("-")), natural()});
  LangPtr any_number = seq({any_integer, optional(seq({literal("."), repeat(digit(), 1, -1)})),
                            optional(seq({byte_set(chars("eE")), optional(byte_set(chars("+-"))),
                                          repeat(digit(), 1, -1)}))});
  LangPtr scalars =
      alt({any_string, any_number, literal("true"), literal("false"), literal("null")});
  std::map<int, LangPtr> any_values, any_objects, any_arrays;

  LangPtr string(int min, int max) {
    return seq({literal("\""), repeat(character, min, max), literal("\"")});
  }
  static LangPtr natural() {
    return alt({literal("0"), seq({byte_range('1', '9'), star(digit())})});
  }

  // Any JSON value with at most `depth` containers nested in it (depth 0: a scalar).
  LangPtr any_value(int depth) {
    if (depth <= 0) return scalars;
    if (auto it = any_values.find(depth); it != any_values.end()) return it->second;
    LangPtr v = alt({scalars, any_object(depth), any_array(depth)});
    any_values[depth] = v;
    return v;
  }
  // Any object whose members hold values with at most depth - 1 containers.
  LangPtr any_object(int depth) {
    if (auto it = any_objects.find(depth); it != any_objects.end()) return it->second;
    LangPtr member = seq({any_string, colon, any_value(depth - 1)});
    LangPtr o = seq(
        {literal("{"), ws, optional(seq({member, star(seq({sep, member}))})), ws, literal("}")});
    any_objects[depth] = o;
    return o;
  }
  LangPtr any_array(int depth) {
    if (auto it = any_arrays.find(depth); it != any_arrays.end()) return it->second;
    LangPtr item = any_value(depth - 1);
    LangPtr a =
        seq({literal("["), ws, optional(seq({item, star(seq({sep, item}))})), ws, literal("]")});
    any_arrays[depth] = a;
    return a;
  }
};

std::string decimal(uint64_t v) {
  return std::to_string(v);
}

uint64_t pow10(int n) {
  uint64_t p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

// Decimal strings of equal length, a <= b: every string between them.
LangPtr same_length(std::string_view a, std::string_view b) {
  if (a.empty()) return literal("");
  const size_t rest = a.size() - 1;
  if (a[0] == b[0]) return seq({literal(a.substr(0, 1)), same_length(a.substr(1), b.substr(1))});
  const bool a_low = a.substr(1).find_first_not_of('0') == std::string_view::npos;
  const bool b_high = b.substr(1).find_first_not_of('9') == std::string_view::npos;
  if (a_low && b_high)
    return seq({byte_range(uint8_t(a[0]), uint8_t(b[0])), repeat(digit(), int(rest), int(rest))});
  std::vector<LangPtr> parts;
  parts.push_back(seq({literal(a.substr(0, 1)), same_length(a.substr(1), std::string(rest, '9'))}));
  if (a[0] + 1 <= b[0] - 1)
    parts.push_back(seq(
        {byte_range(uint8_t(a[0] + 1), uint8_t(b[0] - 1)), repeat(digit(), int(rest), int(rest))}));
  parts.push_back(seq({literal(b.substr(0, 1)), same_length(std::string(rest, '0'), b.substr(1))}));
  return alt(std::move(parts));
}

int digits(uint64_t v) {
  return int(decimal(v).size());
}

// Naturals in [lo, hi] written without leading zeros.
LangPtr natural_range(uint64_t lo, uint64_t hi) {
  std::vector<LangPtr> parts;
  for (int d = digits(lo); d <= digits(hi); ++d) {
    const uint64_t a = std::max(lo, d == 1 ? 0 : pow10(d - 1));
    const uint64_t b = std::min(hi, pow10(d) - 1);
    if (a <= b) parts.push_back(same_length(decimal(a), decimal(b)));
  }
  return alt(std::move(parts));
}

// Naturals >= lo.
LangPtr natural_at_least(uint64_t lo) {
  const int d = digits(lo);
  return alt(
      {natural_range(lo, pow10(d) - 1), seq({byte_range('1', '9'), repeat(digit(), d, -1)})});
}

LangPtr naturals(uint64_t lo, std::optional<uint64_t> hi) {
  return hi ? natural_range(lo, *hi) : natural_at_least(lo);
}

// Integers in [lo, hi], either end open when absent.
LangPtr integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<LangPtr> parts;
  if (!hi || *hi >= 0) {
    const uint64_t from = uint64_t(std::max<int64_t>(lo.value_or(0), 0));
    if (!hi || int64_t(from) <= *hi)
      parts.push_back(naturals(from, hi ? std::optional<uint64_t>(uint64_t(*hi)) : std::nullopt));
  }
  if (!lo || *lo <= -1) {  // negative values, by magnitude
    const uint64_t from = uint64_t(hi && *hi < 0 ? -*hi : 1);
    const std::optional<uint64_t> to = lo ? std::optional<uint64_t>(uint64_t(-*lo)) : std::nullopt;
    if (!to || from <= *to) parts.push_back(seq({literal("-"), naturals(from, to)}));
  }
  return alt(std::move(parts));
}

// Numbers without an exponent in [lo, hi] (integer bounds, either open).
LangPtr number_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  const LangPtr any_fraction = optional(seq({literal("."), repeat(digit(), 1, -1)}));
  const LangPtr zero_fraction = optional(seq({literal("."), repeat(literal("0"), 1, -1)}));
  // Magnitudes k.f with k in [from, to) and any fraction, or k == to with a zero fraction.
  auto magnitudes = [&](uint64_t from, std::optional<uint64_t> to) -> LangPtr {
    if (!to) return seq({natural_at_least(from), any_fraction});
    std::vector<LangPtr> parts;
    if (*to >= 1 && from <= *to - 1)
      parts.push_back(seq({natural_range(from, *to - 1), any_fraction}));
    if (from <= *to) parts.push_back(seq({literal(decimal(*to)), zero_fraction}));
    return alt(std::move(parts));
  };
  std::vector<LangPtr> parts;
  if (!hi || *hi >= 0) {
    const uint64_t from = uint64_t(std::max<int64_t>(lo.value_or(0), 0));
    if (!hi || int64_t(from) <= *hi)
      parts.push_back(magnitudes(from, hi ? std::optional<uint64_t>(uint64_t(*hi)) : std::nullopt));
  }
  if (!lo || *lo < 0) {
    const uint64_t from = uint64_t(hi && *hi < 0 ? -*hi : 0);
    const std::optional<uint64_t> to = lo ? std::optional<uint64_t>(uint64_t(-*lo)) : std::nullopt;
    if (!to || from <= *to) parts.push_back(seq({literal("-"), magnitudes(from, to)}));
  }
  return alt(std::move(parts));
}

const std::set<std::string>& annotations() {
  static const std::set<std::string> k = {"title",    "description", "$schema",
                                          "$comment", "examples",    "default"};
  return k;
}

const std::set<std::string>& supported() {
  static const std::set<std::string> k = {"type",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "enum",
                                          "const",
                                          "items",
                                          "minItems",
                                          "maxItems",
                                          "minLength",
                                          "maxLength",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "anyOf"};
  return k;
}

bool type_matches(const json& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "integer")
    return v.is_number_integer() ||
           (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  return false;
}

class Compiler {
 public:
  LangPtr schema(const json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(path, "the schema false admits no value");
      return p_.any_value(kMaxAnyJsonDepth);
    }
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    for (const auto& [key, value] : s.items())
      if (!supported().contains(key) && !annotations().contains(key))
        fail(path, "the keyword '" + key +
                       "' is not supported (supported: type, properties, "
                       "required, additionalProperties, enum, const, items, minItems, maxItems, "
                       "minLength, maxLength, minimum, maximum, exclusiveMinimum, "
                       "exclusiveMaximum, anyOf)");
    if (s.contains("anyOf")) {
      for (const auto& [key, value] : s.items())
        if (key != "anyOf" && !annotations().contains(key))
          fail(path, "'" + key + "' beside anyOf is not supported: put it in each alternative");
      const json& any = s.at("anyOf");
      if (!any.is_array() || any.empty()) fail(path + ".anyOf", "must be a non-empty array");
      std::vector<LangPtr> parts;
      for (size_t i = 0; i < any.size(); ++i)
        parts.push_back(schema(any[i], path + ".anyOf[" + std::to_string(i) + "]"));
      return alt(std::move(parts));
    }
    std::vector<std::string> types = types_of(s, path);
    if (s.contains("const")) return literal(s.at("const").dump());
    if (s.contains("enum")) {
      const json& e = s.at("enum");
      if (!e.is_array() || e.empty()) fail(path + ".enum", "must be a non-empty array");
      std::vector<LangPtr> parts;
      for (const json& v : e) {
        bool ok = types.empty();
        for (const std::string& t : types) ok = ok || type_matches(v, t);
        if (ok) parts.push_back(literal(v.dump()));
      }
      if (parts.empty()) fail(path + ".enum", "no value has the schema's type");
      return alt(std::move(parts));
    }
    if (types.empty()) {  // inferred from the keywords, else any value
      if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties"))
        types = {"object"};
      else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems"))
        types = {"array"};
      else if (s.contains("minLength") || s.contains("maxLength"))
        types = {"string"};
      else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
               s.contains("exclusiveMaximum"))
        types = {"number"};
      else
        return p_.any_value(kMaxAnyJsonDepth);
    }
    std::vector<LangPtr> parts;
    for (const std::string& t : types) parts.push_back(typed(s, t, path));
    return alt(std::move(parts));
  }

 private:
  [[noreturn]] static void fail(const std::string& path, const std::string& why) {
    throw SchemaError("JSON schema at " + path + ": " + why);
  }

  std::vector<std::string> types_of(const json& s, const std::string& path) {
    static const std::set<std::string> known = {"object",  "array",   "string", "number",
                                                "integer", "boolean", "null"};
    std::vector<std::string> out;
    if (!s.contains("type")) return out;
    const json& t = s.at("type");
    auto add = [&](const json& v) {
      if (!v.is_string() || !known.contains(v.get<std::string>()))
        fail(path + ".type", "unknown type " + v.dump());
      out.push_back(v.get<std::string>());
    };
    if (t.is_array()) {
      if (t.empty()) fail(path + ".type", "an empty list of types admits no value");
      for (const json& v : t) add(v);
    } else {
      add(t);
    }
    return out;
  }

  static int count(const json& s, const char* key, const std::string& path, int fallback) {
    if (!s.contains(key)) return fallback;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1'000'000)
      fail(path + "." + key, "must be an integer in [0, 1000000]");
    return int(v.get<int64_t>());
  }

  static std::optional<double> bound(const json& s, const char* key, const std::string& path) {
    if (!s.contains(key)) return std::nullopt;
    const json& v = s[key];
    if (!v.is_number() || !(std::fabs(v.get<double>()) <= kMaxBound))
      fail(path + "." + key, "must be a number of magnitude at most 1e15");
    return v.get<double>();
  }

  LangPtr typed(const json& s, const std::string& type, const std::string& path) {
    if (type == "null") return literal("null");
    if (type == "boolean") return alt({literal("true"), literal("false")});
    if (type == "string") {
      const int min = count(s, "minLength", path, 0), max = count(s, "maxLength", path, -1);
      if (max >= 0 && min > max) fail(path, "minLength is greater than maxLength");
      return (min == 0 && max < 0) ? p_.any_string : p_.string(min, max);
    }
    if (type == "integer" || type == "number") return numeric(s, type == "integer", path);
    if (type == "array") return array(s, path);
    return object(s, path);
  }

  LangPtr numeric(const json& s, bool integer, const std::string& path) {
    const std::optional<double> min = bound(s, "minimum", path), max = bound(s, "maximum", path);
    const std::optional<double> xmin = bound(s, "exclusiveMinimum", path);
    const std::optional<double> xmax = bound(s, "exclusiveMaximum", path);
    if (!min && !max && !xmin && !xmax) return integer ? p_.any_integer : p_.any_number;
    std::optional<int64_t> lo, hi;
    if (integer) {
      if (min) lo = int64_t(std::ceil(*min));
      if (xmin) lo = std::max(lo.value_or(INT64_MIN), int64_t(std::floor(*xmin)) + 1);
      if (max) hi = int64_t(std::floor(*max));
      if (xmax) hi = std::min(hi.value_or(INT64_MAX), int64_t(std::ceil(*xmax)) - 1);
      if (lo && hi && *lo > *hi) fail(path, "no integer lies within the bounds");
      return integer_range(lo, hi);
    }
    if (xmin || xmax)
      fail(path, "exclusiveMinimum and exclusiveMaximum are supported for integers only");
    for (const auto& [b, key] : {std::pair{min, "minimum"}, std::pair{max, "maximum"}})
      if (b && std::floor(*b) != *b)
        fail(path + "." + key, "a number's bounds must be whole numbers");
    if (min) lo = int64_t(*min);
    if (max) hi = int64_t(*max);
    if (lo && hi && *lo > *hi) fail(path, "minimum is greater than maximum");
    return number_range(lo, hi);
  }

  LangPtr array(const json& s, const std::string& path) {
    const int min = count(s, "minItems", path, 0), max = count(s, "maxItems", path, -1);
    if (max >= 0 && min > max) fail(path, "minItems is greater than maxItems");
    LangPtr item = s.contains("items") ? schema(s.at("items"), path + ".items")
                                       : p_.any_value(kMaxAnyJsonDepth - 1);
    LangPtr body = literal("");
    if (max != 0) {
      LangPtr list =
          seq({item, repeat(seq({p_.sep, item}), std::max(min - 1, 0), max < 0 ? -1 : max - 1)});
      body = min == 0 ? optional(list) : list;
    }
    return seq({literal("["), p_.ws, body, p_.ws, literal("]")});
  }

  LangPtr object(const json& s, const std::string& path) {
    if (s.contains("additionalProperties") && !s.at("additionalProperties").is_boolean())
      fail(path + ".additionalProperties", "only false or true is supported");
    const bool closed =
        s.contains("additionalProperties") && !s.at("additionalProperties").get<bool>();
    std::set<std::string> required;
    if (s.contains("required")) {
      const json& r = s.at("required");
      if (!r.is_array()) fail(path + ".required", "must be an array of property names");
      for (const json& n : r) {
        if (!n.is_string()) fail(path + ".required", "must be an array of property names");
        required.insert(n.get<std::string>());
      }
    }
    if (!s.contains("properties")) {
      if (!required.empty()) fail(path + ".required", "names a property not in properties");
      if (closed) return seq({literal("{"), p_.ws, literal("}")});
      return p_.any_object(kMaxAnyJsonDepth);
    }
    const json& props = s.at("properties");
    if (!props.is_object()) fail(path + ".properties", "must be an object");
    for (const std::string& r : required)
      if (!props.contains(r)) fail(path + ".required", "names '" + r + "', not in properties");
    std::vector<std::pair<LangPtr, bool>> members;
    for (const auto& [name, sub] : props.items()) {
      LangPtr value = schema(sub, path + ".properties." + name);
      members.emplace_back(seq({literal(json(name).dump()), p_.colon, value}),
                           required.contains(name));
    }
    // rest[i][first]: members i.. given whether one is already written (then a comma leads).
    const size_t n = members.size();
    std::vector<std::array<LangPtr, 2>> rest(n + 1);
    rest[n] = {literal(""), literal("")};
    for (size_t i = n; i-- > 0;)
      for (int first = 0; first < 2; ++first) {
        LangPtr with = first ? seq({members[i].first, rest[i + 1][0]})
                             : seq({p_.sep, members[i].first, rest[i + 1][0]});
        rest[i][size_t(first)] = members[i].second ? with : alt({with, rest[i + 1][size_t(first)]});
      }
    return seq({literal("{"), p_.ws, rest[0][1], p_.ws, literal("}")});
  }

 private:
  Pieces p_;
};

}  // namespace

LangPtr json_schema_language(std::string_view schema_json) {
  // An ordered_json keeps each object's keys as the text wrote them: properties are generated
  // in schema order.
  json schema;
  try {
    check_json_text(schema_json, "JSON schema");
    check_json_depth(schema_json, "JSON schema", 32);
    schema = json::parse(schema_json);
  } catch (const json::exception& e) {
    throw SchemaError(std::string("JSON schema: invalid JSON: ") +
                      json_parse_error_reason(e.what()));
  } catch (const std::exception& e) {
    throw SchemaError(e.what());
  }
  return Compiler().schema(schema, "$");
}

LangPtr json_object_language() {
  Pieces p;
  return p.any_object(kMaxJsonObjectDepth);
}

}  // namespace hearth::structured
