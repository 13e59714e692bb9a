// The body of POST /v1/completions and /v1/chat/completions, read and checked: every field of
// OpenAI's API that hearth honours, hearth's own extras at the top level (as vLLM accepts
// them), and a 400 naming the field for anything wrong, unsupported or unknown — a typo is
// never silently ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gateway/request_json.h"
#include "gateway/tool_calls/tool_request.h"
#include "worker/engine/request_settings.h"

namespace hearth::gateway {

// A model name is a short word (NAME or NAME:PROFILE); longer is refused before any lookup.
inline constexpr size_t kMaxModelNameBytes = 256;

// Bounds on what a request may carry to a worker, so that no field can grow the worker's submit
// frame past its limit (a frame over it costs the gateway's whole connection to the worker,
// and with it every other stream on that connection).
inline constexpr size_t kMaxCacheSaltBytes = 1024;
inline constexpr size_t kMaxStopStringBytes = 1024;

enum class Endpoint { Completions, ChatCompletions };

// Sampling defaults a model's generation_config.json gives (vLLM's --generation-config auto):
// used for every field a request leaves out.
struct GenerationDefaults {
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;
  std::optional<int> max_new_tokens;  // caps the default max_tokens (vLLM does the same)
  static GenerationDefaults from_generation_config(const nlohmann::json& config);
};

// One prompt of a request, as given: text (completions), token ids, or chat messages (the
// caller renders them with the model's chat template).
struct PromptInput {
  std::optional<std::string> text;
  std::vector<int32_t> tokens;
  nlohmann::ordered_json messages;  // chat only
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;    // as asked: "NAME" or "NAME:PROFILE"
  std::string profile;  // the part after ':' (empty: the default profile)
  std::string model_name;
  std::vector<PromptInput> prompts;  // completions may batch several; chat has one
  RequestSettings settings;          // shared by every choice; each choice gets its own seed
  // max_tokens absent: settings.max_tokens is only a cap (generation_config.json's
  // max_new_tokens, else none), and each prompt gets the context left after it (vLLM's default).
  bool max_tokens_given = false;
  bool seed_given = false;  // else the gateway draws one per request
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;  // completions: each choice's text starts with its prompt's
  // Log probabilities: completions' `logprobs: N` (N alternatives; 0 = the chosen token's
  // only), chat's `logprobs: true` with `top_logprobs: N`. Absent: none are returned.
  bool want_logprobs = false;
  int top_logprobs = 0;
  std::string cache_salt;  // requests with different salts never share cached prefix blocks
  // Chat: passed to the template.
  bool add_generation_prompt = true;
  nlohmann::ordered_json template_extra = nlohmann::ordered_json::object();  // tools, ...
  ToolSettings tools;  // chat: tools, tool_choice, parallel_tool_calls
};

// The body's "model" (NAME or NAME:PROFILE), read first to find the model whose defaults the
// rest needs. Throws a 400 naming "model" when it is missing, not a string, empty or too long.
std::string request_model(const nlohmann::ordered_json& body);

// Throws ApiError (400) naming the field: every read goes through request_json.h's Field.
// Whether prompt + max_tokens fits the context is the worker's check (its context may be
// shorter than the model's), answered as a 400 too.
CompletionRequest parse_completion_request(const nlohmann::ordered_json& body, Endpoint endpoint,
                                           const GenerationDefaults& defaults);

// Chat messages checked (an array of objects with a known role, content a string, null or
// text parts, name a string or null) and copied for the chat template, each content joined
// into one string and a null name dropped.
nlohmann::ordered_json read_chat_messages(const Field& messages);

// A 400 naming "prompt" (or "messages") for a prompt of no tokens, or one that with max_tokens
// does not fit `context_length`: then OpenAI's code "context_length_exceeded" and vLLM's
// wording. Checked here so that it never reaches a worker.
void check_prompt_fits(const CompletionRequest& request, size_t prompt_tokens, int context_length);

// A 400 naming "prompt" (or "messages") when `submit_request` (worker_request_json's) would
// make a submit frame over `max_frame_bytes`, the limit the worker states in its hello
// (WorkerConnection::max_request_bytes, ipc::max_submit_bytes).
void check_submit_size(const CompletionRequest& request, const nlohmann::json& submit_request,
                       size_t max_frame_bytes);

// Splits "NAME:PROFILE" (the profile part optional).
std::pair<std::string, std::string> split_model_profile(const std::string& model);

// The worker's submit request for one choice: its request-setting keys, `seed` the choice's.
nlohmann::json worker_request_json(const CompletionRequest& request, const std::string& id,
                                   const std::vector<int32_t>& prompt_tokens, uint64_t seed);

}  // namespace hearth::gateway
