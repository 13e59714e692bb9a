#include "gateway/token_request.h"

#include "gateway/api_error.h"
#include "gateway/openai_request.h"
#include "gateway/request_json.h"

namespace hearth::gateway {

TokenizeRequest parse_tokenize_request(const nlohmann::ordered_json& body) {
  const Field b(body, "");
  TokenizeRequest r;
  r.model = request_model(body);
  if (b["messages"].present()) {
    r.messages = read_chat_messages(b["messages"]);
    r.add_special_tokens = false;  // the template already holds them
    if (b["add_generation_prompt"].present())
      r.add_generation_prompt = b["add_generation_prompt"].boolean();
  } else if (b["prompt"].present()) {
    r.prompt = b["prompt"].string(SIZE_MAX);
  } else {
    b["prompt"].fail("give a prompt (string) or messages");
  }
  if (b["add_special_tokens"].present()) r.add_special_tokens = b["add_special_tokens"].boolean();
  return r;
}

DetokenizeRequest parse_detokenize_request(const nlohmann::ordered_json& body) {
  const Field b(body, "");
  DetokenizeRequest r;
  r.model = request_model(body);
  const Field tokens = b["tokens"];
  if (!tokens.is_array() || !tokens.array().empty()) r.tokens = tokens.token_ids();  // [] is ""
  return r;
}

void check_vocabulary(const std::vector<int32_t>& ids, size_t vocab_size,
                      const std::string& param) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (size_t(ids[i]) >= vocab_size)
      throw bad_param(param, "token id " + std::to_string(ids[i]) + " at position " +
                                 std::to_string(i) + " is outside the vocabulary (" +
                                 std::to_string(vocab_size) + " tokens)");
}

}  // namespace hearth::gateway
