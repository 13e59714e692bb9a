#include "gateway/chat_template.h"

#include <stdexcept>

namespace hearth::gateway {

using jinja::DictData;
using jinja::Value;

ChatTemplate ChatTemplate::load(std::string_view source, const jinja::ParseLimits& limits) {
  return ChatTemplate(jinja::Template::parse(source, limits));
}

std::string ChatTemplate::render(const ChatTemplateInput& input) const {
  if (!input.messages.is_array()) throw std::invalid_argument("chat messages must be a JSON array");
  if (!input.extra.is_object()) {
    throw std::invalid_argument("extra chat template variables must be a JSON object");
  }
  // transformers: render(messages=..., tools=..., documents=..., add_generation_prompt=...,
  // **special_tokens_map, **kwargs), kwargs overriding the special tokens.
  DictData vars;
  if (input.bos_token) vars.set(Value::string("bos_token"), Value::string(*input.bos_token));
  if (input.eos_token) vars.set(Value::string("eos_token"), Value::string(*input.eos_token));
  vars.set(Value::string("tools"), Value::none());
  vars.set(Value::string("documents"), Value::none());
  for (const auto& [key, value] : input.extra.items()) {
    if (key == "messages" || key == "add_generation_prompt") {
      throw std::invalid_argument("'" + key + "' is not an extra chat template variable");
    }
    vars.set(Value::string(key), jinja::from_json(value));
  }
  vars.set(Value::string("messages"), jinja::from_json(input.messages));
  vars.set(Value::string("add_generation_prompt"), Value::boolean(input.add_generation_prompt));

  jinja::RenderOptions options;
  options.limits = limits_;
  if (input.now) {
    options.now = *input.now;
  } else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &options.now);
  }
  return template_.render(vars, options);
}

namespace {

std::optional<std::string> special_token(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  throw std::invalid_argument(std::string("tokenizer_config.json: '") + key +
                              "' is neither a string nor an object with a string 'content'");
}

}  // namespace

ChatTemplateConfig ChatTemplate::from_tokenizer_config(const nlohmann::json& config,
                                                       std::string_view name) {
  if (!config.is_object()) throw std::invalid_argument("tokenizer_config.json is not an object");
  ChatTemplateConfig out;
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) {
    throw std::invalid_argument("tokenizer_config.json has no chat_template");
  }
  const std::string wanted = name.empty() ? "default" : std::string(name);
  if (it->is_string()) {
    if (!name.empty() && name != "default") {
      throw std::invalid_argument("tokenizer_config.json has one chat_template, not one named '" +
                                  wanted + "'");
    }
    out.source = it->get<std::string>();
  } else if (it->is_array()) {
    bool found = false;
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == wanted && entry.contains("template") &&
          entry["template"].is_string()) {
        out.source = entry["template"].get<std::string>();
        found = true;
      }
    }
    if (!found) {
      throw std::invalid_argument("tokenizer_config.json has no chat_template named '" + wanted +
                                  "'");
    }
  } else {
    throw std::invalid_argument("tokenizer_config.json: chat_template must be a string or a list");
  }
  out.bos_token = special_token(config, "bos_token");
  out.eos_token = special_token(config, "eos_token");
  return out;
}

std::string render_chat(std::string_view chat_template, const OrderedJson& messages,
                        bool add_generation_prompt, const std::optional<std::string>& bos_token,
                        const std::optional<std::string>& eos_token, const OrderedJson& extra) {
  ChatTemplateInput input;
  input.messages = messages;
  input.add_generation_prompt = add_generation_prompt;
  input.bos_token = bos_token;
  input.eos_token = eos_token;
  input.extra = extra;
  return ChatTemplate::load(chat_template).render(input);
}

}  // namespace hearth::gateway
