#include "gateway/endpoints/chat.h"

#include "gateway/api_error.h"
#include "gateway/endpoints/generation.h"
#include "gateway/http/server.h"

namespace hearth::gateway {

std::string render_chat(const ModelEntry& model, const nlohmann::ordered_json& messages,
                        bool add_generation_prompt, const nlohmann::ordered_json& extra) {
  if (!model.chat_template)
    throw ApiError(400, "invalid_request_error", model.chat_template_error, "messages");
  ChatTemplateInput in;
  in.messages = messages;
  in.add_generation_prompt = add_generation_prompt;
  in.bos_token = model.bos_token;
  in.eos_token = model.eos_token;
  in.extra = extra;
  try {
    return model.chat_template->render(in);
  } catch (const std::exception& e) {
    throw ApiError(400, "invalid_request_error",
                   std::string("the chat template refused the messages: ") + e.what(), "messages");
  }
}

void add_chat_endpoint(http::Server& server, Generation& generation) {
  server.Post("/v1/chat/completions", [&generation](const http::Request& req, http::Response& res) {
    generation.handle(Endpoint::ChatCompletions, req, res);
  });
}

}  // namespace hearth::gateway
