// The bodies of vLLM's POST /tokenize and POST /detokenize, read and checked: a 400 naming the
// field for anything missing or of the wrong type, and for token ids the tokenizer does not
// have.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hearth::gateway {

// /tokenize: a prompt (text), or chat messages rendered with the model's template.
struct TokenizeRequest {
  std::string model;  // as asked: "NAME" or "NAME:PROFILE"
  std::optional<std::string> prompt;
  nlohmann::ordered_json messages;  // read_chat_messages' copy, when no prompt
  bool add_generation_prompt = true;
  bool add_special_tokens = true;  // default: true for a prompt, false for messages (vLLM's)
};
TokenizeRequest parse_tokenize_request(const nlohmann::ordered_json& body);

// /detokenize: token ids back to text.
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};
DetokenizeRequest parse_detokenize_request(const nlohmann::ordered_json& body);

// A 400 naming `param` for the first id at or past `vocab_size` (which would decode to nothing).
void check_vocabulary(const std::vector<int32_t>& ids, size_t vocab_size, const std::string& param);

}  // namespace hearth::gateway
