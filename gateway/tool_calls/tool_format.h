// Which tool-call format a model writes, read from its chat template (the template is what
// teaches the model the format, so it decides, not the model's name), and the ids the gateway
// gives the calls it parses.
#pragma once

#include <string>
#include <string_view>

namespace hearth::gateway {

enum class ToolFormat {
  None,        // the template renders no tool calls hearth knows: tools cannot be parsed
  Llama3Json,  // Llama 3.1 / 3.2: {"name": ..., "parameters": ...}, maybe after <|python_tag|>
  Hermes,      // Qwen 2.5 / 3, Hermes: <tool_call>{"name": ..., "arguments": ...}</tool_call>
  Mistral,     // Mistral: [TOOL_CALLS][{"name": ..., "arguments": ...}, ...]
};

// The format a chat template's source text teaches, by the markup it renders for tool calls.
ToolFormat tool_format_of_template(std::string_view source);

// "llama3_json", "hermes", "mistral" or "none" (vLLM's --tool-call-parser names).
const char* tool_format_name(ToolFormat format);

// The markup that opens a call. Llama 3.1's `<|python_tag|>` and Mistral's `[TOOL_CALLS]` are
// special tokens, which the worker's text leaves out: the gateway puts them back from the
// token id (special_marker says which one).
std::string_view tool_call_start(ToolFormat format);
bool special_marker(ToolFormat format);

// With tool calls to parse (tools under tool_choice "auto"), a 400 naming "tools" when the
// model's template teaches no format hearth reads: checked before any worker is asked.
void check_tool_format(bool parse_tool_calls, ToolFormat format);

// A call id unique to `key` (the response id, choice and call index): Mistral's templates
// accept only 9 alphanumeric characters; the others get OpenAI's "call_" and 24.
std::string make_tool_call_id(ToolFormat format, std::string_view key);

}  // namespace hearth::gateway
