#include "gateway/response_format.h"

#include <string>

namespace hearth::gateway {

namespace {

void check_size(const Field& f, const StructuredOutput& s) {
  try {
    check_structured_output(s);
  } catch (const SettingError& e) {
    f.fail(e.reason());
  }
}

StructuredOutput response_format(const Field& f) {
  const Field type = f["type"];  // also refuses a response_format that is not an object
  for (const std::string& key : f.keys())
    if (key != "type" && key != "json_schema") f[key].fail("is not a field of response_format");
  const std::string t = type.is_string() ? type.string(64) : "";
  if (t == "text") return {};
  if (t == "json_object") return {OutputFormat::JsonObject, ""};
  if (t != "json_schema")
    type.fail("must be \"text\", \"json_object\" or \"json_schema\", got " + type.describe());
  const Field js = f["json_schema"];
  if (!js.is_object()) js.fail("is required with type \"json_schema\" (an object)");
  for (const std::string& key : js.keys())
    if (key != "name" && key != "schema" && key != "strict" && key != "description")
      js[key].fail("is not a field of json_schema");
  js["name"].string(256);  // OpenAI requires a name; it changes nothing here
  if (js["strict"].present()) js["strict"].boolean();  // output always follows the schema
  const Field schema = js["schema"];
  if (!schema.is_object()) schema.fail("is required: a JSON Schema object");
  StructuredOutput s{OutputFormat::JsonSchema, schema.object().dump()};
  check_size(schema, s);
  return s;
}

}  // namespace

StructuredOutput read_structured_output(const Field& b) {
  StructuredOutput out;
  std::string from;  // the field that asked for a format
  auto take = [&](const Field& f, StructuredOutput s) {
    if (s.format == OutputFormat::Text) return;
    if (!from.empty()) f.fail("cannot be combined with " + from);
    from = f.name();
    out = std::move(s);
  };
  if (const Field f = b["response_format"]; f.present()) take(f, response_format(f));
  if (const Field f = b["guided_json"]; f.present()) {
    if (!f.is_object() && !f.is_string()) f.fail("must be a JSON Schema (an object) or its text");
    StructuredOutput s{OutputFormat::JsonSchema,
                       f.is_string() ? f.string(SIZE_MAX) : f.object().dump()};
    check_size(f, s);
    take(f, std::move(s));
  }
  if (const Field f = b["guided_regex"]; f.present()) {
    StructuredOutput s{OutputFormat::Regex, f.string(kMaxStructuredSpecBytes)};
    check_size(f, s);
    take(f, std::move(s));
  }
  return out;
}

void put_structured_output(nlohmann::json& j, const StructuredOutput& s) {
  switch (s.format) {
    case OutputFormat::Text:
      break;
    case OutputFormat::JsonObject:
      j["guided_json_object"] = true;
      break;
    case OutputFormat::JsonSchema:
      j["guided_json"] = s.spec;
      break;
    case OutputFormat::Regex:
      j["guided_regex"] = s.spec;
      break;
  }
  if (!s.prefix.empty()) j["guided_prefix"] = s.prefix;
  if (!s.suffix.empty()) j["guided_suffix"] = s.suffix;
}

}  // namespace hearth::gateway
