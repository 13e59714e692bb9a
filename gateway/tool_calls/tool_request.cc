#include "gateway/tool_calls/tool_request.h"

#include <cctype>
#include <set>

namespace hearth::gateway {

using ordered_json = nlohmann::ordered_json;

namespace {

constexpr size_t kMaxFunctionNameBytes = 64;  // OpenAI: a-z, A-Z, 0-9, _ and -, at most 64

void only_keys(const Field& object, const std::set<std::string>& known) {
  for (const std::string& key : object.keys())
    if (!known.count(key)) object[key].fail("is not supported");
}

std::string function_name(const Field& name) {
  if (!name.present()) name.fail("is required");
  const std::string s = name.string(kMaxFunctionNameBytes);
  if (s.empty()) name.fail("must not be empty");
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-')
      name.fail("may hold only letters, digits, '_' and '-', got " + name.describe());
  return s;
}

void check_tool(const Field& tool) {
  // The type first, so that a custom tool is refused by its type, not by its "custom" member.
  const Field type = tool["type"];
  if (!type.is_string() || type.string(SIZE_MAX) != "function")
    type.fail("only \"function\" tools are supported, got " + type.describe());
  only_keys(tool, {"type", "function"});
  const Field f = tool["function"];
  f.object();
  only_keys(f, {"name", "description", "parameters", "strict"});
  function_name(f["name"]);
  if (f["description"].present()) f["description"].string(SIZE_MAX);
  if (f["parameters"].present()) f["parameters"].object();
  if (const Field strict = f["strict"]; strict.present() && strict.boolean())
    strict.fail("true needs the structured-output mask, which hearth does not have yet");
}

}  // namespace

ToolSettings read_tool_settings(const Field& body) {
  ToolSettings s;
  const Field tools = body["tools"];
  if (tools.present()) {
    if (!tools.is_array() || tools.array().empty())
      tools.fail("must be a non-empty array of tools, got " + tools.describe());
    if (tools.array().size() > kMaxTools)
      tools.fail("at most " + std::to_string(kMaxTools) + " tools");
    for (const Field& tool : tools.items()) check_tool(tool);
    s.tools = tools.array();
  }
  std::string choice = s.tools.is_null() ? "none" : "auto";  // OpenAI's defaults
  if (const Field c = body["tool_choice"]; c.present()) {
    if (c.is_object()) {
      only_keys(c, {"type", "function"});
      const Field f = c["function"];
      f.object();
      const Field type = c["type"];
      if (!type.is_string() || type.string(SIZE_MAX) != "function")
        type.fail("must be \"function\", got " + type.describe());
      only_keys(f, {"name"});
      s.forced_name = function_name(f["name"]);
      if (s.tools.is_null()) c.fail("names a function but the request has no tools");
      bool known = false;
      for (const auto& tool : s.tools) known |= tool["function"]["name"] == s.forced_name;
      if (!known) f["name"].fail("names no function in tools: " + f["name"].describe());
      choice = "required";
    } else {
      if (!c.is_string()) c.fail("must be \"none\", \"auto\", \"required\" or a named function");
      choice = c.string(SIZE_MAX);
      if (choice != "none" && choice != "auto" && choice != "required")
        c.fail("must be \"none\", \"auto\", \"required\" or a named function, got " + c.describe());
      if (choice == "required" && s.tools.is_null()) c.fail("\"required\" needs tools");
    }
  }
  s.forced = choice == "required";
  s.parse = choice != "none" && !s.tools.is_null();
  if (const Field p = body["parallel_tool_calls"]; p.present()) s.parallel = p.boolean();
  return s;
}

ordered_json read_message_tool_calls(const Field& tool_calls) {
  if (!tool_calls.is_array()) tool_calls.fail("must be an array, got " + tool_calls.describe());
  ordered_json out = ordered_json::array();
  for (const Field& call : tool_calls.items()) {
    ordered_json copy = call.object();
    if (call["id"].present()) call["id"].string(SIZE_MAX);
    if (const Field type = call["type"];
        type.present() && (!type.is_string() || type.string(SIZE_MAX) != "function"))
      type.fail("must be \"function\", got " + type.describe());
    const Field f = call["function"];
    f.object();
    function_name(f["name"]);
    if (const Field args = f["arguments"]; args.is_string()) {
      const ordered_json parsed =
          ordered_json::parse(args.string(SIZE_MAX), nullptr, /*allow_exceptions=*/false);
      if (parsed.is_object()) copy["function"]["arguments"] = parsed;
    } else if (args.present()) {
      args.object();
    }
    out.push_back(std::move(copy));
  }
  return out;
}

}  // namespace hearth::gateway
