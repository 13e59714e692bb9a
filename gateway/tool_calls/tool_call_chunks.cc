#include "gateway/tool_calls/tool_call_chunks.h"

namespace hearth::gateway {

using json = nlohmann::json;

std::vector<json> release_tool_pieces(const CompletionRequest& request, const ResponseMeta& meta,
                                      ToolFormat format, ChoiceState& c,
                                      std::vector<ToolCallPiece> pieces,
                                      std::vector<TokenLogprob> lps, bool& first,
                                      const std::function<std::string(int32_t)>& token_text) {
  std::vector<json> out;
  for (ToolCallPiece& p : pieces) {
    if (p.call) {
      const int call_index = int(c.tool_calls.size());
      // Unique within the gateway (the response id is), the same for the same response.
      std::string id = make_tool_call_id(
          format, meta.id + "-" + std::to_string(c.index) + "-" + std::to_string(call_index));
      if (request.stream) {
        for (json& chunk :
             make_tool_call_chunks(request, meta, c.index, call_index, id, *p.call, first))
          out.push_back(std::move(chunk));
        first = false;
      }
      c.tool_calls.emplace_back(std::move(id), std::move(*p.call));
      continue;
    }
    c.text += p.content;
    if (request.stream) {
      out.push_back(
          make_chunk(request, meta, c.index, p.content, lps, std::nullopt, first, token_text));
      first = false;
      lps.clear();  // a token's logprobs go out once, with the first text it released
    }
  }
  if (request.stream && !lps.empty()) {
    out.push_back(make_chunk(request, meta, c.index, "", lps, std::nullopt, first, token_text));
    first = false;
  }
  return out;
}

}  // namespace hearth::gateway
