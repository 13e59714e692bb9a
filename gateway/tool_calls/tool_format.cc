#include "gateway/tool_calls/tool_format.h"

#include <cstdint>

#include "gateway/api_error.h"

namespace hearth::gateway {

ToolFormat tool_format_of_template(std::string_view source) {
  const auto has = [&](std::string_view s) { return source.find(s) != std::string_view::npos; };
  if (has("<tool_call>")) return ToolFormat::Hermes;
  if (has("[TOOL_CALLS]")) return ToolFormat::Mistral;
  // Llama 3.1's templates describe the call object in words ("parameters") and render past
  // calls as {"name": ..., "parameters": ...} after <|python_tag|> or in an ipython turn.
  if (has("<|start_header_id|>") && has("\"parameters\"") && has("tool_call")) {
    return ToolFormat::Llama3Json;
  }
  return ToolFormat::None;
}

const char* tool_format_name(ToolFormat format) {
  switch (format) {
    case ToolFormat::Llama3Json:
      return "llama3_json";
    case ToolFormat::Hermes:
      return "hermes";
    case ToolFormat::Mistral:
      return "mistral";
    case ToolFormat::None:
      break;
  }
  return "none";
}

std::string_view tool_call_start(ToolFormat format) {
  switch (format) {
    case ToolFormat::Llama3Json:
      return "<|python_tag|>";
    case ToolFormat::Hermes:
      return "<tool_call>";
    case ToolFormat::Mistral:
      return "[TOOL_CALLS]";
    case ToolFormat::None:
      break;
  }
  return {};
}

bool special_marker(ToolFormat format) {
  return format == ToolFormat::Llama3Json || format == ToolFormat::Mistral;
}

void check_tool_format(bool parse_tool_calls, ToolFormat format) {
  if (parse_tool_calls && format == ToolFormat::None)
    throw bad_param("tools",
                    "the model's chat template shows no tool-call format hearth can read (Llama "
                    "3.1 JSON, Hermes <tool_call>, Mistral [TOOL_CALLS]); use tool_choice "
                    "\"none\" or a --chat-template that has one");
}

std::string make_tool_call_id(ToolFormat format, std::string_view key) {
  // FNV-1a of the key, then splitmix64 steps: well spread, and the same key gives the same id.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  static constexpr char kAlphabet[] =
      "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  const int length = format == ToolFormat::Mistral ? 9 : 24;
  std::string id = format == ToolFormat::Mistral ? "" : "call_";
  for (int i = 0; i < length; ++i) {
    h += 0x9E3779B97F4A7C15ull;
    uint64_t z = h;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    id += kAlphabet[z % 62];
  }
  return id;
}

}  // namespace hearth::gateway
