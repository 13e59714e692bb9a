// A choice's tool-call parser output turned into the response: content onto the choice's text,
// calls (with their ids) onto its tool_calls, and, streaming, the chunks that carry them in the
// order the model wrote them. The completion session calls this for every token.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gateway/openai_response.h"
#include "gateway/tool_calls/tool_call_parser.h"

namespace hearth::gateway {

// `lps`: the logprobs of the token that released `pieces` (sent once, with its first chunk).
// `first`: no chunk of this choice was sent yet; cleared once one is. No chunks unless
// request.stream.
std::vector<nlohmann::json> release_tool_pieces(
    const CompletionRequest& request, const ResponseMeta& meta, ToolFormat format, ChoiceState& c,
    std::vector<ToolCallPiece> pieces, std::vector<TokenLogprob> lps, bool& first,
    const std::function<std::string(int32_t)>& token_text);

}  // namespace hearth::gateway
