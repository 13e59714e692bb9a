#include "gateway/openai_request.h"

#include <cmath>
#include <set>

#include "gateway/api_error.h"

namespace hearth::gateway {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

namespace {

constexpr int kMaxChoices = 16;      // n (and prompts x n for batched completions)
constexpr int kMaxStopStrings = 16;  // OpenAI allows 4; vLLM any number
constexpr int kMaxTopLogprobs = 20;  // as OpenAI
constexpr int kMaxTokensCap = 1 << 20;

// Fields a client may send that change nothing here: accepted and ignored, as OpenAI ignores
// them for a model that has no use for them.
const std::set<std::string> kIgnored = {"user", "metadata", "store", "service_tier",
                                        "parallel_tool_calls"};

// Fields read below, by endpoint; anything else is refused by name.
const std::set<std::string> kCommon = {"model",
                                       "max_tokens",
                                       "temperature",
                                       "top_p",
                                       "seed",
                                       "stop",
                                       "n",
                                       "stream",
                                       "logprobs",
                                       "top_k",
                                       "min_p",
                                       "repetition_penalty",
                                       "ignore_eos",
                                       "cache_salt",
                                       "frequency_penalty",
                                       "presence_penalty",
                                       "logit_bias",
                                       "response_format",
                                       "best_of",
                                       "stream_options"};
const std::set<std::string> kCompletionsOnly = {"prompt", "echo", "suffix"};
const std::set<std::string> kChatOnly = {
    "messages", "max_completion_tokens", "top_logprobs",        "add_generation_prompt",
    "tools",    "tool_choice",           "chat_template_kwargs"};

bool present(const ordered_json& body, const char* key) {
  auto it = body.find(key);
  return it != body.end() && !it->is_null();
}

double number(const ordered_json& body, const char* key, double lo, double hi) {
  const ordered_json& v = body.at(key);
  if (!v.is_number()) throw bad_param(key, "must be a number, got " + v.dump());
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    throw bad_param(
        key, "must be in [" + json(lo).dump() + ", " + json(hi).dump() + "], got " + v.dump());
  return d;
}

int64_t integer(const ordered_json& body, const char* key, int64_t lo, int64_t hi) {
  const ordered_json& v = body.at(key);
  if (!v.is_number_integer()) throw bad_param(key, "must be an integer, got " + v.dump());
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
    throw bad_param(key, "is out of range");
  const int64_t i = v.get<int64_t>();
  if (i < lo || i > hi)
    throw bad_param(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                             "], got " + v.dump());
  return i;
}

bool boolean(const ordered_json& body, const char* key) {
  const ordered_json& v = body.at(key);
  if (!v.is_boolean()) throw bad_param(key, "must be true or false, got " + v.dump());
  return v.get<bool>();
}

std::vector<int32_t> token_list(const ordered_json& v, const std::string& param) {
  std::vector<int32_t> out;
  for (const ordered_json& t : v) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      throw bad_param(param, "token ids must be integers >= 0, got " + t.dump());
    out.push_back(int32_t(t.get<int64_t>()));
  }
  if (out.empty()) throw bad_param(param, "must not be empty");
  return out;
}

bool is_token_list(const ordered_json& v) {
  return v.is_array() && !v.empty() && v.front().is_number();
}

std::vector<PromptInput> read_prompts(const ordered_json& body) {
  if (!present(body, "prompt")) throw bad_param("prompt", "is required");
  const ordered_json& p = body.at("prompt");
  std::vector<PromptInput> out;
  if (p.is_string()) {
    out.push_back({p.get<std::string>(), {}, {}});
  } else if (is_token_list(p)) {
    out.push_back({std::nullopt, token_list(p, "prompt"), {}});
  } else if (p.is_array() && !p.empty()) {
    for (const ordered_json& one : p) {
      if (one.is_string())
        out.push_back({one.get<std::string>(), {}, {}});
      else if (is_token_list(one))
        out.push_back({std::nullopt, token_list(one, "prompt"), {}});
      else
        throw bad_param("prompt",
                        "must be a string, an array of strings, an array of token ids or an "
                        "array of such arrays");
    }
  } else {
    throw bad_param("prompt",
                    "must be a string, an array of strings, an array of token ids or an array "
                    "of such arrays");
  }
  return out;
}

// Chat message content: a string, null, or text parts (joined with newlines, as vLLM does).
ordered_json message_content(const ordered_json& content, size_t index) {
  const std::string param = "messages[" + std::to_string(index) + "].content";
  if (content.is_string() || content.is_null()) return content;
  if (!content.is_array()) throw bad_param(param, "must be a string or an array of parts");
  std::string text;
  for (const ordered_json& part : content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
        !part["text"].is_string())
      throw bad_param(param, "only text parts ({\"type\": \"text\", \"text\": ...}) are supported");
    if (!text.empty()) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

ordered_json read_messages(const ordered_json& body) {
  if (!present(body, "messages")) throw bad_param("messages", "is required");
  const ordered_json& in = body.at("messages");
  if (!in.is_array() || in.empty()) throw bad_param("messages", "must be a non-empty array");
  static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool"};
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < in.size(); ++i) {
    const ordered_json& m = in[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw bad_param(at, "must be an object");
    if (!m.contains("role") || !m["role"].is_string() || !kRoles.count(m["role"]))
      throw bad_param(at + ".role", "must be one of system, developer, user, assistant, tool");
    ordered_json copy = m;  // keeps name, tool_calls, tool_call_id for the template
    copy["content"] = message_content(m.contains("content") ? m["content"] : ordered_json(), i);
    out.push_back(std::move(copy));
  }
  return out;
}

std::vector<std::string> stop_strings(const ordered_json& body) {
  const ordered_json& v = body.at("stop");
  std::vector<std::string> out;
  const ordered_json list = v.is_string() ? ordered_json::array({v}) : v;
  if (!list.is_array()) throw bad_param("stop", "must be a string or an array of strings");
  if (int(list.size()) > kMaxStopStrings)
    throw bad_param("stop", "at most " + std::to_string(kMaxStopStrings) + " stop strings");
  for (const ordered_json& s : list) {
    if (!s.is_string() || s.get<std::string>().empty())
      throw bad_param("stop", "stop strings must be non-empty strings");
    out.push_back(s.get<std::string>());
  }
  return out;
}

void refuse_unless(bool ok, const char* param, const std::string& why) {
  if (!ok) throw bad_param(param, why);
}

}  // namespace

GenerationDefaults GenerationDefaults::from_generation_config(const json& config) {
  GenerationDefaults d;
  if (!config.is_object()) return d;
  auto num = [&](const char* key) -> std::optional<float> {
    auto it = config.find(key);
    if (it == config.end() || !it->is_number()) return std::nullopt;
    return float(it->get<double>());
  };
  // transformers ignores temperature/top_p when do_sample is false: greedy.
  const bool sample = config.value("do_sample", true);
  d.temperature = sample ? num("temperature") : std::optional<float>(0.0f);
  d.top_p = sample ? num("top_p") : std::nullopt;
  d.min_p = num("min_p");
  d.repetition_penalty = num("repetition_penalty");
  if (auto it = config.find("top_k"); sample && it != config.end() && it->is_number_integer())
    d.top_k = int(it->get<int64_t>());
  return d;
}

std::pair<std::string, std::string> split_model_profile(const std::string& model) {
  const size_t colon = model.rfind(':');
  if (colon == std::string::npos) return {model, ""};
  return {model.substr(0, colon), model.substr(colon + 1)};
}

CompletionRequest parse_completion_request(const ordered_json& body, Endpoint endpoint,
                                           const GenerationDefaults& defaults) {
  if (!body.is_object())
    throw ApiError(400, "invalid_request_error", "the body must be a JSON object");
  const bool chat = endpoint == Endpoint::ChatCompletions;
  for (const auto& [key, _] : body.items()) {
    if (kCommon.count(key) || kIgnored.count(key)) continue;
    if ((chat ? kChatOnly : kCompletionsOnly).count(key)) continue;
    throw bad_param(key, "is not a parameter of this endpoint");
  }

  CompletionRequest r;
  r.endpoint = endpoint;
  if (!present(body, "model") || !body["model"].is_string() ||
      body["model"].get<std::string>().empty())
    throw bad_param("model", "is required (a model name, or NAME:PROFILE)");
  r.model = body["model"].get<std::string>();
  std::tie(r.model_name, r.profile) = split_model_profile(r.model);

  if (chat) {
    PromptInput p;
    p.messages = read_messages(body);
    r.prompts.push_back(std::move(p));
    if (present(body, "add_generation_prompt"))
      r.add_generation_prompt = boolean(body, "add_generation_prompt");
    if (present(body, "tools")) {
      if (!body["tools"].is_array()) throw bad_param("tools", "must be an array");
      r.template_extra["tools"] = body["tools"];
    }
    if (present(body, "tool_choice")) {
      const ordered_json& c = body["tool_choice"];
      refuse_unless(c.is_string() && (c == "none" || c == "auto"), "tool_choice",
                    "only \"none\" and \"auto\" are supported (hearth does not parse tool calls)");
    }
    if (present(body, "chat_template_kwargs")) {
      if (!body["chat_template_kwargs"].is_object())
        throw bad_param("chat_template_kwargs", "must be an object");
      for (const auto& [k, v] : body["chat_template_kwargs"].items()) r.template_extra[k] = v;
    }
  } else {
    r.prompts = read_prompts(body);
    refuse_unless(!present(body, "echo") || !boolean(body, "echo"), "echo", "is not supported");
    refuse_unless(!present(body, "suffix"), "suffix", "is not supported");
  }

  // Sampling: the request's value, else the model's generation_config.json, else hearth's.
  SamplingParams& s = r.settings.sampling;
  if (defaults.temperature) s.temperature = *defaults.temperature;
  if (defaults.top_p) s.top_p = *defaults.top_p;
  if (defaults.top_k) s.top_k = std::max(0, *defaults.top_k);
  if (defaults.min_p) s.min_p = *defaults.min_p;
  if (defaults.repetition_penalty) s.repetition_penalty = *defaults.repetition_penalty;
  if (present(body, "temperature")) s.temperature = float(number(body, "temperature", 0, 100));
  if (present(body, "top_p")) {
    s.top_p = float(number(body, "top_p", 0, 1));
    refuse_unless(s.top_p > 0, "top_p", "must be greater than 0");
  }
  if (present(body, "top_k")) {
    const int64_t k = integer(body, "top_k", -1, 1 << 30);
    s.top_k = k < 0 ? 0 : int(k);  // -1 is vLLM's "off"
  }
  if (present(body, "min_p")) s.min_p = float(number(body, "min_p", 0, 1));
  if (present(body, "repetition_penalty"))
    s.repetition_penalty = float(number(body, "repetition_penalty", 1e-3, 100));
  if (present(body, "seed")) {
    const ordered_json& v = body["seed"];
    if (!v.is_number_integer()) throw bad_param("seed", "must be an integer, got " + v.dump());
    // OpenAI's seed is a signed 64-bit integer; its bits are the Philox key.
    s.seed = v.is_number_unsigned() ? v.get<uint64_t>() : uint64_t(v.get<int64_t>());
    r.seed_given = true;
  }
  for (const char* penalty : {"frequency_penalty", "presence_penalty"})
    if (present(body, penalty))
      refuse_unless(number(body, penalty, -2, 2) == 0, penalty,
                    "is not supported (use repetition_penalty)");
  if (present(body, "logit_bias"))
    refuse_unless(body["logit_bias"].is_object() && body["logit_bias"].empty(), "logit_bias",
                  "is not supported");
  if (present(body, "response_format"))
    refuse_unless(
        body["response_format"].is_object() && body["response_format"].value("type", "") == "text",
        "response_format", "only {\"type\": \"text\"} is supported");

  const char* max_key =
      chat && present(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (present(body, max_key)) r.settings.max_tokens = int(integer(body, max_key, 1, kMaxTokensCap));
  if (present(body, "stop")) r.settings.stop = stop_strings(body);
  if (present(body, "ignore_eos")) r.settings.ignore_eos = boolean(body, "ignore_eos");
  if (present(body, "cache_salt")) {
    if (!body["cache_salt"].is_string()) throw bad_param("cache_salt", "must be a string");
    r.cache_salt = body["cache_salt"].get<std::string>();
  }

  if (present(body, "n")) r.n = int(integer(body, "n", 1, kMaxChoices));
  if (present(body, "best_of"))
    refuse_unless(integer(body, "best_of", 1, kMaxChoices) == r.n, "best_of",
                  "must equal n (hearth returns every choice it generates)");
  if (int(r.prompts.size()) * r.n > kMaxChoices)
    throw bad_param("n", "prompts x n must be at most " + std::to_string(kMaxChoices));
  if (present(body, "stream")) r.stream = boolean(body, "stream");
  if (present(body, "stream_options")) {
    const ordered_json& o = body["stream_options"];
    refuse_unless(r.stream, "stream_options", "is only allowed with stream: true");
    if (!o.is_object()) throw bad_param("stream_options", "must be an object");
    if (o.contains("include_usage")) {
      if (!o["include_usage"].is_boolean())
        throw bad_param("stream_options.include_usage", "must be true or false");
      r.include_usage = o["include_usage"].get<bool>();
    }
  }

  if (chat) {
    if (present(body, "logprobs")) r.want_logprobs = boolean(body, "logprobs");
    if (present(body, "top_logprobs")) {
      refuse_unless(r.want_logprobs, "top_logprobs", "needs logprobs: true");
      r.top_logprobs = int(integer(body, "top_logprobs", 0, kMaxTopLogprobs));
    }
  } else if (present(body, "logprobs")) {
    r.want_logprobs = true;
    r.top_logprobs = int(integer(body, "logprobs", 0, kMaxTopLogprobs));
  }
  return r;
}

nlohmann::json worker_request_json(const CompletionRequest& r, const std::string& id,
                                   const std::vector<int32_t>& prompt_tokens, uint64_t seed) {
  const SamplingParams& s = r.settings.sampling;
  json j = {{"id", id},
            {"prompt_tokens", prompt_tokens},
            {"temperature", s.temperature},
            {"top_k", s.top_k},
            {"top_p", s.top_p},
            {"min_p", s.min_p},
            {"repetition_penalty", s.repetition_penalty},
            {"seed", seed},
            {"max_tokens", r.settings.max_tokens},
            {"stop", r.settings.stop},
            {"ignore_eos", r.settings.ignore_eos}};
  if (r.want_logprobs) j["logprobs"] = r.top_logprobs;
  if (!r.cache_salt.empty()) j["cache_salt"] = r.cache_salt;
  return j;
}

}  // namespace hearth::gateway
