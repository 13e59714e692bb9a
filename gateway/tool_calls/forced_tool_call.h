// tool_choice "required" or a named function: the output constrained to be one call in the
// model's tool-call format, as a structured-output grammar (worker/engine/structured/) that
// the tool-call parser (tool_call_parser.h) reads back as a call.
//   Hermes:  <tool_call>\n{"name": <a tool>, "arguments": <its parameters>}\n</tool_call>
//   Llama 3.1 JSON: {"name": <a tool>, "parameters": <its parameters>}, bare at the output's
//            start (the parser takes it there; <|python_tag|> is a special token the mask
//            cannot write as text)
//   Mistral: [{"name": <a tool>, "arguments": <its parameters>}], the array without its
//            [TOOL_CALLS] token (a special token too): the gateway feeds the parser that
//            marker before the output (forced_call_primes_parser).
#pragma once

#include "gateway/tool_calls/tool_format.h"
#include "gateway/tool_calls/tool_request.h"
#include "worker/engine/request_settings.h"

namespace hearth::gateway {

// The grammar of a forced call: a JSON Schema (anyOf over the allowed tools' {"name": const,
// <arguments key>: parameters}) with the format's literal markup as prefix and suffix. Throws a
// 400 naming `tools[i].function.parameters` and the keyword when a tool's parameters use JSON
// Schema the structured compiler does not support, and one naming `tool_choice` when
// `existing` (response_format, guided_*) already constrains the output.
StructuredOutput forced_tool_call_output(const ToolSettings& tools, ToolFormat format,
                                         const StructuredOutput& existing);

// True when the parser must be fed the format's opening markup before a forced call's output
// (Mistral: the grammar writes the array, not the [TOOL_CALLS] token).
bool forced_call_primes_parser(ToolFormat format);

}  // namespace hearth::gateway
