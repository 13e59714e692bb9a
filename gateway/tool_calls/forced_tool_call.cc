#include "gateway/tool_calls/forced_tool_call.h"

#include <string>

#include "gateway/request_json.h"
#include "worker/engine/structured/json_schema_language.h"

namespace hearth::gateway {

using ordered_json = nlohmann::ordered_json;

namespace {

// {"name": const, <key>: parameters}: both required, nothing else.
ordered_json call_schema(const std::string& name, const ordered_json& parameters,
                         const char* arguments_key) {
  ordered_json properties = ordered_json::object();
  properties["name"] = {{"const", name}};
  properties[arguments_key] = parameters;
  return {{"type", "object"},
          {"properties", std::move(properties)},
          {"required", {"name", arguments_key}},
          {"additionalProperties", false}};
}

}  // namespace

bool forced_call_primes_parser(ToolFormat format) {
  return format == ToolFormat::Mistral;
}

StructuredOutput forced_tool_call_output(const ToolSettings& tools, ToolFormat format,
                                         const StructuredOutput& existing) {
  if (existing.format != OutputFormat::Text)
    Field(nullptr, "tool_choice")
        .fail("a forced tool call cannot be combined with response_format or guided_*");
  const char* arguments_key = format == ToolFormat::Llama3Json ? "parameters" : "arguments";
  ordered_json calls = ordered_json::array();
  for (size_t i = 0; i < tools.tools.size(); ++i) {
    const ordered_json& f = tools.tools[i]["function"];
    const std::string name = f["name"].get<std::string>();
    if (!tools.forced_name.empty() && name != tools.forced_name) continue;
    const ordered_json parameters =
        f.contains("parameters") ? f["parameters"] : ordered_json{{"type", "object"}};
    try {
      structured::json_schema_language(
          parameters.dump());  // refused keywords by name, before any worker
    } catch (const structured::SchemaError& e) {
      Field(parameters, "tools[" + std::to_string(i) + "].function.parameters").fail(e.what());
    }
    calls.push_back(call_schema(name, parameters, arguments_key));
  }
  ordered_json call = calls.size() == 1 ? calls[0] : ordered_json{{"anyOf", calls}};
  StructuredOutput s{OutputFormat::JsonSchema, ""};
  switch (format) {
    case ToolFormat::Hermes:
      s.prefix = "<tool_call>\n";
      s.suffix = "\n</tool_call>";
      break;
    case ToolFormat::Mistral:
      call = {{"type", "array"}, {"items", call}, {"minItems", 1}, {"maxItems", 1}};
      break;
    case ToolFormat::Llama3Json:
    case ToolFormat::None:
      break;
  }
  s.spec = call.dump();
  try {
    check_structured_output(s);
  } catch (const SettingError& e) {
    Field(nullptr, "tools").fail(e.reason());
  }
  return s;
}

}  // namespace hearth::gateway
