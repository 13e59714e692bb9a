// Chat templates: a model's tokenizer_config.json `chat_template` rendered the way
// transformers' apply_chat_template renders it (jinja2's ImmutableSandboxedEnvironment with
// trim_blocks and lstrip_blocks, its tojson, raise_exception and strftime_now), by hearth's own
// Jinja subset (gateway/jinja/). A template is parsed, and refused if it uses anything the
// subset lacks, when the model loads; rendering then never meets an unknown construct.
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "gateway/jinja/template.h"

namespace hearth::gateway {

// Request JSON keeps its key order (Python dicts do, and tojson prints in that order).
using OrderedJson = nlohmann::ordered_json;

struct ChatTemplateInput {
  OrderedJson messages = OrderedJson::array();  // [{"role": ..., "content": ...}, ...]
  bool add_generation_prompt = false;
  // Special tokens, as transformers passes its special_tokens_map (absent when null).
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  // Other template variables: tools, documents, enable_thinking, date_string, ... (an
  // object). tools and documents are None when absent, as in transformers.
  OrderedJson extra = OrderedJson::object();
  // The clock strftime_now() reads; local time at render when empty.
  std::optional<std::tm> now;
};

// What a tokenizer_config.json says about chat formatting.
struct ChatTemplateConfig {
  std::string source;  // the chosen template text
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
};

class ChatTemplate {
 public:
  // Throws jinja::TemplateError naming the unsupported construct (or syntax error) and line.
  static ChatTemplate load(std::string_view source, const jinja::ParseLimits& limits = {});

  // Throws jinja::TemplateError (raise_exception, misuse of undefined values, limits) or
  // std::invalid_argument for input that is not a chat (messages not an array, ...).
  std::string render(const ChatTemplateInput& input) const;

  void set_limits(const jinja::RenderLimits& limits) { limits_ = limits; }

  // Reads `chat_template` (a string, or transformers' list of named templates: `name` is
  // used, "default" when empty) and the bos/eos tokens (strings or AddedToken objects).
  // Throws std::invalid_argument when the config has no usable template.
  static ChatTemplateConfig from_tokenizer_config(const nlohmann::json& config,
                                                  std::string_view name = {});

 private:
  explicit ChatTemplate(jinja::Template t) : template_(std::move(t)) {}
  jinja::Template template_;
  jinja::RenderLimits limits_;
};

// One-shot: parse and render.
std::string render_chat(std::string_view chat_template, const OrderedJson& messages,
                        bool add_generation_prompt, const std::optional<std::string>& bos_token,
                        const std::optional<std::string>& eos_token,
                        const OrderedJson& extra = OrderedJson::object());

}  // namespace hearth::gateway
