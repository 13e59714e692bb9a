#include "gateway/endpoints/generation.h"

#include <random>

#include "gateway/completion_session.h"
#include "gateway/endpoints/chat.h"
#include "gateway/tool_calls/forced_tool_call.h"
#include "gateway/endpoints/find_model.h"
#include "gateway/endpoints/sse_stream.h"
#include "gateway/request_json.h"
#include "gateway/token_request.h"

namespace hearth::gateway {

namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Token ids of one prompt as the model's tokenizer gives them: text gets the post-processor's
// special tokens, a rendered chat template already holds them.
std::vector<int32_t> tokenize(const ModelEntry& model, const PromptInput& p,
                              const CompletionRequest& r, int context_length) {
  std::vector<int32_t> ids;
  if (!p.messages.is_null() && !p.messages.empty()) {
    ids = model.tokenizer->encode(
        render_chat(model, p.messages, r.add_generation_prompt, r.template_extra),
        /*add_special_tokens=*/false);
  } else if (p.text) {
    ids = model.tokenizer->encode(*p.text, /*add_special_tokens=*/true);
  } else {
    ids = p.tokens;
  }
  check_prompt_fits(r, ids.size(), context_length);
  return ids;
}

}  // namespace

void Generation::handle(Endpoint endpoint, const http::Request& req, http::Response& res) {
  // First, while it is cheap: a full gateway spends nothing on the request.
  std::shared_ptr<const void> admitted = admission_.admit();

  const nlohmann::ordered_json body = parse_request_body(req.body);
  const std::string model_field = request_model(body);
  const auto [model_name, profile] = split_model_profile(model_field);
  const ModelEntry& model = find_model(catalog_, model_name);
  CompletionRequest request = parse_completion_request(body, endpoint, model.defaults);
  {
    // logit_bias ids against the model's vocabulary, while a 400 can still name the field.
    std::vector<int32_t> ids;
    for (const auto& [id, bias] : request.settings.sampling.logit_bias) ids.push_back(id);
    check_vocabulary(ids, model.tokenizer->vocab_size(), "logit_bias");
  }
  check_tool_format(request.tools.parse, model.tool_format);
  if (request.tools.forced)
    request.settings.structured =
        forced_tool_call_output(request.tools, model.tool_format, request.settings.structured);
  std::vector<std::vector<int32_t>> prompts;
  // The context the profile's workers run with, which may be shorter than the model's.
  const int context = pool_.context_length(profile, model.context_length);
  for (const PromptInput& p : request.prompts)
    prompts.push_back(tokenize(model, p, request, context));

  ResponseMeta meta;
  meta.id = std::string(endpoint == Endpoint::ChatCompletions ? "chatcmpl-" : "cmpl-") +
            std::to_string(unix_now()) + "-" + std::to_string(next_id_++);
  meta.created = unix_now();
  meta.model = request.model;
  const uint64_t seed =
      request.seed_given ? request.settings.sampling.seed : std::random_device{}();
  const bool stream = request.stream;
  auto session = std::make_shared<CompletionSession>(std::move(request), meta, model,
                                                     pool_.get(model.name, profile), metrics_);
  session->start(prompts, seed);
  const auto deadline = CompletionSession::Clock::now() + request_timeout_;

  if (!stream) {
    // A client that leaves while it waits gets its choices cancelled in the worker (vLLM
    // aborts on disconnect, streaming or not), and shutdown does not wait for them.
    res.set_content(session->wait_response(deadline, req.is_connection_closed)
                        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                    "application/json");
    return;
  }
  stream_session(res, std::move(session), deadline, std::move(admitted));
}

}  // namespace hearth::gateway
