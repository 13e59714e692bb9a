#include "gateway/endpoints/tokenization.h"

#include "gateway/endpoints/chat.h"
#include "gateway/endpoints/find_model.h"
#include "gateway/http/server.h"
#include "gateway/openai_request.h"
#include "gateway/request_json.h"
#include "gateway/token_request.h"

namespace hearth::gateway {

namespace {

using json = nlohmann::json;

std::string tokenize_response(const ModelCatalog& catalog, const nlohmann::ordered_json& body) {
  const TokenizeRequest r = parse_tokenize_request(body);
  const ModelEntry& model = find_model(catalog, split_model_profile(r.model).first);
  const std::vector<int32_t> ids =
      r.prompt ? model.tokenizer->encode(*r.prompt, r.add_special_tokens)
               : model.tokenizer->encode(
                     render_chat(model, r.messages, r.add_generation_prompt, json::object()),
                     r.add_special_tokens);
  return json{{"count", ids.size()}, {"max_model_len", model.context_length}, {"tokens", ids}}
      .dump();
}

std::string detokenize_response(const ModelCatalog& catalog, const nlohmann::ordered_json& body) {
  const DetokenizeRequest r = parse_detokenize_request(body);
  const ModelEntry& model = find_model(catalog, split_model_profile(r.model).first);
  check_vocabulary(r.tokens, model.tokenizer->vocab_size(), "tokens");
  return json{{"prompt", model.tokenizer->decode(r.tokens, false)}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

void add_tokenization_endpoints(http::Server& server, const ModelCatalog& catalog) {
  server.Post("/tokenize", [&catalog](const http::Request& req, http::Response& res) {
    res.set_content(tokenize_response(catalog, parse_request_body(req.body)), "application/json");
  });
  server.Post("/detokenize", [&catalog](const http::Request& req, http::Response& res) {
    res.set_content(detokenize_response(catalog, parse_request_body(req.body)), "application/json");
  });
}

}  // namespace hearth::gateway
