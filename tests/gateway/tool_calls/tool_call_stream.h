// A chat choice's stream as the completion session sends it, for a fixed model output: the
// output fed to the tool-call parser one byte at a time (every boundary a token boundary),
// then finished. For the chunk tests and the official client's test, since the default model
// never writes a call by itself.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gateway/tool_calls/tool_call_chunks.h"

namespace hearth::gateway::testing {

struct ToolCallStream {
  std::vector<nlohmann::json> chunks;  // every chunk, the finish chunk last
  nlohmann::json response;             // the whole (non-streamed) response
};

inline ToolCallStream tool_call_stream(ToolFormat format, const std::string& output,
                                       const std::string& tools_json = "[]") {
  CompletionRequest r;
  r.endpoint = Endpoint::ChatCompletions;
  r.model = r.model_name = "fortunes";
  r.stream = true;
  r.tools.tools = nlohmann::ordered_json::parse(tools_json);
  r.tools.parse = true;
  const ResponseMeta meta{"chatcmpl-test-1", 1700000000, "fortunes"};
  const auto no_text = [](int32_t) { return std::string(); };
  ChoiceState c;
  ToolCallParser parser(format);
  bool first = true;
  ToolCallStream out;
  auto take = [&](std::vector<ToolCallPiece> pieces) {
    for (auto& chunk :
         release_tool_pieces(r, meta, format, c, std::move(pieces), {}, first, no_text))
      out.chunks.push_back(std::move(chunk));
  };
  for (char ch : output) take(parser.feed(std::string(1, ch)));
  take(parser.finish());
  c.finish_reason = c.tool_calls.empty() ? "stop" : "tool_calls";
  out.chunks.push_back(make_chunk(r, meta, 0, "", {}, c.finish_reason, first, no_text));
  out.response = make_response(r, meta, {c}, no_text);
  return out;
}

}  // namespace hearth::gateway::testing
