// A chat request's tools: `tools` (function tools, checked and handed to the chat template),
// `tool_choice`, `parallel_tool_calls`, and the tool calls of earlier assistant turns.
#pragma once

#include <nlohmann/json.hpp>

#include "gateway/request_json.h"

namespace hearth::gateway {

inline constexpr size_t kMaxTools = 128;  // OpenAI's limit

struct ToolSettings {
  nlohmann::ordered_json tools;  // the request's tools for the template; null when none
  bool parse = false;            // tools given and tool_choice not "none": calls read from output
  bool parallel = true;          // parallel_tool_calls: false keeps the first call only
  // tool_choice "required" or a named function: the output is constrained to be a call
  // (forced_tool_call.h), to `forced_name` when it is not empty, else to any of the tools.
  bool forced = false;
  std::string forced_name;
};

// Reads the body's tools, tool_choice and parallel_tool_calls. Throws a 400 naming the field
// for anything else than function tools, and for a named function that is not in `tools`.
ToolSettings read_tool_settings(const Field& body);

// An assistant message's tool_calls, checked, with each `arguments` string that holds a JSON
// object turned into that object (as vLLM does: Llama's and Mistral's templates print it with
// tojson, which would quote a string again).
nlohmann::ordered_json read_message_tool_calls(const Field& tool_calls);

}  // namespace hearth::gateway
