// What the gateway knows of each served model, read once from the weight server's manifest:
// its tokenizer (prompts are tokenized here, so usage counts and /tokenize agree with what the
// worker runs), its chat template, its generation defaults and its context length.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gateway/chat_template.h"
#include "gateway/openai_request.h"
#include "gateway/tool_calls/tool_format.h"
#include "tokenizer/tokenizer.h"

namespace hearth::gateway {

struct ModelEntry {
  std::string name;
  int context_length = 0;   // the model's maximum position (the worker may use less)
  int tensor_parallel = 1;  // the server's shards (issue 26): a worker's degree must be this
  std::shared_ptr<const Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
  std::string chat_template_error;            // why chat is unavailable, when it is
  ToolFormat tool_format = ToolFormat::None;  // the tool calls its chat template teaches
  std::optional<std::string> bos_token, eos_token;
  GenerationDefaults defaults;
  int64_t created = 0;  // when the gateway learned of it (unix seconds), for /v1/models
};

class ModelCatalog {
 public:
  // Reads every model the server at `socket` serves. A chat template the Jinja subset cannot
  // run is reported by `log` and leaves that model without chat (its completions still work).
  // Throws when the server cannot be reached or a manifest is unusable.
  // `chat_template`, when given, replaces every model's own (vLLM's --chat-template): for base
  // models that ship none, or to try another.
  static ModelCatalog load(const std::string& socket,
                           const std::function<void(const std::string&)>& log,
                           const std::optional<std::string>& chat_template = std::nullopt);

  // Null when no such model is served.
  const ModelEntry* find(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, ModelEntry> models_;
};

}  // namespace hearth::gateway
