// OpenAI's response shapes, built from a worker's events: whole responses, SSE chunks, usage
// and logprobs, for /v1/completions and /v1/chat/completions.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gateway/openai_request.h"
#include "gateway/tool_calls/tool_call_parser.h"

namespace hearth::gateway {

// One token as a worker event reports it, with its alternatives when asked.
struct TokenLogprob {
  int32_t token = 0;
  std::string text;  // the token's own text (decoded alone), for logprobs listings
  double logprob = 0;
  std::vector<std::pair<int32_t, double>> top;  // (id, logprob), best first
};

// What one choice produced so far: its text, its tokens' logprobs, and once finished why.
struct ChoiceState {
  int index = 0;
  std::string text;
  std::vector<TokenLogprob> logprobs;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
  std::optional<std::string> finish_reason;  // "stop" | "length" | "tool_calls"
  // Chat with tools parsed: `text` is the content outside calls, and these the calls.
  std::shared_ptr<ToolCallParser> tool_parser;
  std::vector<std::pair<std::string, ParsedToolCall>> tool_calls;  // (id, call)
};

// Maps a worker's stop reason to OpenAI's finish_reason: eos and stop strings are "stop",
// the token budget or the context is "length". Anything else is not a finish (an error).
std::optional<std::string> finish_reason_of(const std::string& stop);

struct ResponseMeta {
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;    // as the client named it
};

// The whole non-streaming response.
nlohmann::json make_response(const CompletionRequest& request, const ResponseMeta& meta,
                             const std::vector<ChoiceState>& choices,
                             const std::function<std::string(int32_t)>& token_text);

// One streaming chunk carrying `delta_text` (and the new tokens' logprobs) for one choice, or
// its finish (finish_reason set, empty delta). Chat's first chunk per choice carries the role.
// `text_offset`: where the first of `logprobs` starts in the choice's whole text (completions'
// text_offset, in bytes, as the whole response counts it).
nlohmann::json make_chunk(const CompletionRequest& request, const ResponseMeta& meta, int index,
                          const std::string& delta_text, const std::vector<TokenLogprob>& logprobs,
                          const std::optional<std::string>& finish_reason, bool first,
                          const std::function<std::string(int32_t)>& token_text,
                          size_t text_offset = 0);

// The chunks that stream one tool call as OpenAI does: its index, id, type and function name
// with empty arguments, then the arguments. `first`: the choice's first chunk (with the role).
std::vector<nlohmann::json> make_tool_call_chunks(const CompletionRequest& request,
                                                  const ResponseMeta& meta, int index,
                                                  int call_index, const std::string& id,
                                                  const ParsedToolCall& call, bool first);

// The closing usage chunk of a stream (stream_options.include_usage): no choices.
nlohmann::json make_usage_chunk(const CompletionRequest& request, const ResponseMeta& meta,
                                const std::vector<ChoiceState>& choices);

// "data: JSON\n\n" and the final "data: [DONE]\n\n".
std::string sse_event(const nlohmann::json& data);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

}  // namespace hearth::gateway
