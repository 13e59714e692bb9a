#include "gateway/openai_request.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "gateway/api_error.h"
#include "gateway/response_format.h"
#include "ipc/protocol.h"

namespace hearth::gateway {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

namespace {

constexpr int kMaxChoices = 16;         // n (and prompts x n for batched completions)
constexpr size_t kMaxStopStrings = 16;  // OpenAI allows 4; vLLM any number

// Fields a client may send that change nothing here: accepted and ignored, as OpenAI ignores
// them for a model that has no use for them. safety_identifier and prompt_cache_key are
// OpenAI's successors to user (abuse tracking, cache routing: one gateway has one cache).
const std::set<std::string> kIgnored = {"user",         "metadata",          "store",
                                        "service_tier", "safety_identifier", "prompt_cache_key"};

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
                                       "guided_json",
                                       "guided_regex",
                                       "best_of",
                                       "stream_options"};
const std::set<std::string> kCompletionsOnly = {"prompt", "echo", "suffix"};
const std::set<std::string> kChatOnly = {
    "messages",  "max_completion_tokens", "top_logprobs",         "add_generation_prompt",
    "tools",     "tool_choice",           "chat_template_kwargs", "parallel_tool_calls",
    "modalities"};

// A prompt's token ids, when `v` looks like some (an array whose first item is a number).
bool is_token_list(const Field& v) {
  return v.is_array() && !v.array().empty() && v.array().front().is_number();
}

PromptInput one_prompt(const Field& p) {
  if (p.is_string()) return {p.string(SIZE_MAX), {}, {}};
  return {std::nullopt, p.token_ids(), {}};
}

// OpenAI's four shapes: a string, an array of token ids, an array of strings, an array of
// arrays of token ids. A list of several prompts is of one kind, the kind of its first item
// (vLLM's schema takes no mix either); an inner array is non-empty and only ids.
std::vector<PromptInput> read_prompts(const Field& p) {
  static const std::string kShape =
      "must be a string, an array of strings, an array of token ids or an array of such arrays";
  if (!p.present()) p.fail("is required");
  std::vector<PromptInput> out;
  if (p.is_string() || is_token_list(p)) {
    out.push_back(one_prompt(p));
    return out;
  }
  if (!p.is_array() || p.array().empty()) p.fail(kShape + ", got " + p.describe());
  const std::vector<Field> items = p.items();
  const bool strings = items.front().is_string();
  for (const Field& one : items) {
    if (strings && !one.is_string())
      one.fail(
          "must be a string, as prompt[0] is (a list of prompts is all strings or all "
          "arrays of token ids), got " +
          one.describe());
    if (!strings && !one.is_array())
      one.fail(items.front().is_array()
                   ? "must be an array of token ids, as prompt[0] is (a list of prompts is all "
                     "strings or all arrays of token ids), got " +
                         one.describe()
                   : kShape + ", got " + one.describe());
    if (!strings && one.array().empty()) one.fail("must be a non-empty array of token ids");
    out.push_back(one_prompt(one));  // an inner array's items are ids: token_ids() checks
  }
  return out;
}

// Chat message content: a string, null, or text parts (joined with newlines, as vLLM does).
ordered_json message_content(const Field& content) {
  if (!content.present()) return ordered_json();
  if (content.is_string()) return content.string(SIZE_MAX);
  if (!content.is_array()) content.fail("must be a string or an array of parts");
  std::string text;
  for (const Field& part : content.items()) {
    part.object();
    const Field type = part["type"];
    if (!type.is_string() || type.string(SIZE_MAX) != "text")
      type.fail("only text parts ({\"type\": \"text\", \"text\": ...}) are supported, got " +
                type.describe());
    if (!text.empty()) text += "\n";
    text += part["text"].string(SIZE_MAX);
  }
  return text;
}

}  // namespace

ordered_json read_chat_messages(const Field& messages) {
  static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool"};
  if (!messages.is_array() || messages.array().empty())
    messages.fail("must be a non-empty array, got " + messages.describe());
  ordered_json out = ordered_json::array();
  for (const Field& m : messages.items()) {
    const Field role = m["role"];  // also refuses a message that is not an object
    if (!role.is_string() || !kRoles.count(role.string(SIZE_MAX)))
      role.fail("must be one of system, developer, user, assistant, tool, got " + role.describe());
    ordered_json copy = m.object();  // keeps name, tool_calls, tool_call_id for the template
    copy["content"] = message_content(m["content"]);
    // A participant's name is text the template prints (OpenAI: a string); null is no name,
    // as a null anywhere else is the field left out, and the template sees none.
    if (const Field name = m["name"]; name.present())
      (void)name.string(SIZE_MAX);
    else if (name.exists())
      copy.erase("name");
    if (m["tool_calls"].present()) copy["tool_calls"] = read_message_tool_calls(m["tool_calls"]);
    if (m["tool_call_id"].present()) m["tool_call_id"].string(SIZE_MAX);
    out.push_back(std::move(copy));
  }
  return out;
}

namespace {

void refuse_unless(bool ok, const Field& f, const std::string& why) {
  if (!ok) f.fail(why);
}

// A request setting through the engine's check of its range (request_settings.h), the one
// place those ranges live; its refusal is a 400 naming the field as this request spelled it
// (max_completion_tokens, top_logprobs).
template <typename Check, typename V>
auto checked(const Field& f, Check check, const V& v) {
  try {
    return check(v);
  } catch (const SettingError& e) {
    f.fail(e.reason());
  }
}

// max_tokens or max_completion_tokens: at least 1, as OpenAI asks, and then the engine's range.
int max_tokens(const Field& f) {
  const int64_t n = f.integer();
  if (n < 1) f.fail("must be at least 1, got " + std::to_string(n));
  return checked(f, checked_max_tokens, n);
}

std::vector<std::string> stop_strings(const Field& v) {
  std::vector<std::string> out;
  if (v.is_string()) {
    out.push_back(v.string(kMaxStopStringBytes));
  } else {
    if (!v.is_array()) v.fail("must be a string or an array of strings");
    if (v.array().size() > kMaxStopStrings)
      v.fail("at most " + std::to_string(kMaxStopStrings) + " stop strings");
    for (const Field& s : v.items()) out.push_back(s.string(kMaxStopStringBytes));
  }
  checked(v, check_stop_strings, out);
  return out;
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
  if (auto it = config.find("max_new_tokens");
      it != config.end() && it->is_number_integer() && it->get<int64_t>() >= 1)
    d.max_new_tokens = int(std::min<int64_t>(it->get<int64_t>(), kMaxTokensLimit));
  return d;
}

std::pair<std::string, std::string> split_model_profile(const std::string& model) {
  const size_t colon = model.rfind(':');
  if (colon == std::string::npos) return {model, ""};
  return {model.substr(0, colon), model.substr(colon + 1)};
}

std::string request_model(const ordered_json& body) {
  const Field model = Field(body, "")["model"];
  if (!model.present()) model.fail("is required (a model name, or NAME:PROFILE)");
  std::string name = model.string(kMaxModelNameBytes);
  if (name.empty()) model.fail("must not be empty (a model name, or NAME:PROFILE)");
  return name;
}

CompletionRequest parse_completion_request(const ordered_json& body, Endpoint endpoint,
                                           const GenerationDefaults& defaults) {
  if (!body.is_object())
    throw ApiError(400, "invalid_request_error", "the body must be a JSON object");
  const Field b(body, "");
  const bool chat = endpoint == Endpoint::ChatCompletions;
  for (const std::string& key : b.keys()) {
    // null asks for nothing, as leaving the field out does: clients that send every field of
    // their SDK, unset ones as null ("functions": null), are served.
    if (!b[key].present()) continue;
    if (kCommon.count(key) || kIgnored.count(key)) continue;
    if ((chat ? kChatOnly : kCompletionsOnly).count(key)) continue;
    b[key].fail("is not a parameter of this endpoint");
  }

  // Accepted and ignored, but still of the type OpenAI gives them: a wrong one is a 400.
  if (const Field f = b["user"]; f.present()) (void)f.string(SIZE_MAX);
  if (const Field f = b["metadata"]; f.present()) (void)f.object();
  if (const Field f = b["store"]; f.present()) (void)f.boolean();
  if (const Field f = b["service_tier"]; f.present()) (void)f.string(SIZE_MAX);
  if (const Field f = b["safety_identifier"]; f.present()) (void)f.string(SIZE_MAX);
  if (const Field f = b["prompt_cache_key"]; f.present()) (void)f.string(SIZE_MAX);
  if (const Field f = b["parallel_tool_calls"]; f.present()) (void)f.boolean();

  CompletionRequest r;
  r.endpoint = endpoint;
  r.model = request_model(body);
  std::tie(r.model_name, r.profile) = split_model_profile(r.model);

  if (chat) {
    PromptInput p;
    p.messages = read_chat_messages(b["messages"]);
    r.prompts.push_back(std::move(p));
    if (b["add_generation_prompt"].present())
      r.add_generation_prompt = b["add_generation_prompt"].boolean();
    // OpenAI's default, ["text"], is all hearth makes: "audio" is refused by its item.
    if (const Field m = b["modalities"]; m.present())
      for (const Field& item : m.items())
        if (item.string(64) != "text") item.fail("only \"text\" is supported");
    r.tools = read_tool_settings(b);
    if (!r.tools.tools.is_null()) r.template_extra["tools"] = r.tools.tools;
    if (const Field kwargs = b["chat_template_kwargs"]; kwargs.present())
      for (const auto& [k, v] : kwargs.object().items()) r.template_extra[k] = v;
  } else {
    r.prompts = read_prompts(b["prompt"]);
    if (b["echo"].present()) r.echo = b["echo"].boolean();
    refuse_unless(!b["suffix"].present(), b["suffix"], "is not supported");
  }

  // Sampling: the request's value, else the model's generation_config.json, else hearth's.
  SamplingParams& s = r.settings.sampling;
  if (defaults.temperature) s.temperature = *defaults.temperature;
  if (defaults.top_p) s.top_p = *defaults.top_p;
  if (defaults.top_k) s.top_k = std::max(0, *defaults.top_k);
  if (defaults.min_p) s.min_p = *defaults.min_p;
  if (defaults.repetition_penalty) s.repetition_penalty = *defaults.repetition_penalty;
  if (const Field f = b["temperature"]; f.present())
    s.temperature = checked(f, checked_temperature, f.number());
  if (const Field f = b["top_p"]; f.present()) s.top_p = checked(f, checked_top_p, f.number());
  if (const Field f = b["top_k"]; f.present()) {
    const int64_t k = f.integer();
    s.top_k = k == -1 ? 0 : checked(f, checked_top_k, k);  // -1 is vLLM's "off"
  }
  if (const Field f = b["min_p"]; f.present()) s.min_p = checked(f, checked_min_p, f.number());
  if (const Field f = b["repetition_penalty"]; f.present())
    s.repetition_penalty = checked(f, checked_repetition_penalty, f.number());
  if (b["seed"].present()) {
    // OpenAI's seed is a signed 64-bit integer; its bits are the Philox key.
    s.seed = b["seed"].bits64();
    r.seed_given = true;
  }
  if (const Field f = b["frequency_penalty"]; f.present())
    s.frequency_penalty = checked(f, checked_frequency_penalty, f.number());
  if (const Field f = b["presence_penalty"]; f.present())
    s.presence_penalty = checked(f, checked_presence_penalty, f.number());
  if (const Field f = b["logit_bias"]; f.present()) {
    // Token ids as decimal string keys; the worker checks them against its vocabulary.
    std::vector<std::pair<int64_t, double>> entries;
    for (const std::string& key : f.keys()) {
      int64_t id = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || end != key.data() + key.size())
        f.fail("keys must be token ids, got \"" + key + "\"");
      entries.emplace_back(id, f[key].number());
    }
    s.logit_bias = checked(f, checked_logit_bias, entries);
  }
  r.settings.structured = read_structured_output(b);  // response_format, guided_*

  // Both names are read, so a wrong one is never let through beside a right one; chat's
  // max_completion_tokens wins (OpenAI's newer name). Neither: the context left (see
  // max_tokens_given).
  r.settings.max_tokens = defaults.max_new_tokens.value_or(kMaxTokensLimit);
  r.max_tokens_given = b["max_tokens"].present() || (chat && b["max_completion_tokens"].present());
  if (b["max_tokens"].present()) r.settings.max_tokens = max_tokens(b["max_tokens"]);
  if (chat && b["max_completion_tokens"].present())
    r.settings.max_tokens = max_tokens(b["max_completion_tokens"]);
  if (b["stop"].present()) r.settings.stop = stop_strings(b["stop"]);
  if (b["ignore_eos"].present()) r.settings.ignore_eos = b["ignore_eos"].boolean();
  if (b["cache_salt"].present()) r.cache_salt = b["cache_salt"].string(kMaxCacheSaltBytes);

  if (b["n"].present()) r.n = int(b["n"].integer(1, kMaxChoices));
  if (const Field f = b["best_of"]; f.present())
    refuse_unless(f.integer(1, kMaxChoices) == r.n, f,
                  "must equal n (hearth returns every choice it generates)");
  if (int(r.prompts.size()) * r.n > kMaxChoices)
    b["n"].fail("prompts x n must be at most " + std::to_string(kMaxChoices));
  if (b["stream"].present()) r.stream = b["stream"].boolean();
  if (const Field o = b["stream_options"]; o.present()) {
    refuse_unless(r.stream, o, "is only allowed with stream: true");
    if (o["include_usage"].present()) r.include_usage = o["include_usage"].boolean();
    // include_obfuscation: false is what hearth does anyway (no padding in chunks).
    if (o["include_obfuscation"].present()) (void)o["include_obfuscation"].boolean();
    for (const std::string& key : o.keys())
      if (key != "include_usage" && key != "include_obfuscation")
        o[key].fail("is not a field of stream_options");
  }

  if (chat) {
    if (b["logprobs"].present()) r.want_logprobs = b["logprobs"].boolean();
    if (const Field f = b["top_logprobs"]; f.present()) {
      refuse_unless(r.want_logprobs, f, "needs logprobs: true");
      r.top_logprobs = checked(f, checked_logprobs, f.integer());
    }
  } else if (const Field f = b["logprobs"]; f.present()) {
    r.want_logprobs = true;
    r.top_logprobs = checked(f, checked_logprobs, f.integer());
  }
  // OpenAI's echo with logprobs also lists the prompt's tokens, which the worker does not
  // compute: refused rather than answered without them.
  refuse_unless(!(r.echo && r.want_logprobs), b["echo"],
                "with logprobs is not supported (hearth does not compute the prompt's logprobs)");
  return r;
}

void check_prompt_fits(const CompletionRequest& r, size_t prompt_tokens, int context_length) {
  const char* param = r.endpoint == Endpoint::ChatCompletions ? "messages" : "prompt";
  if (prompt_tokens == 0) throw bad_param(param, "gives no tokens");
  // At least one token is generated, whatever max_tokens says; without max_tokens the request
  // takes the context left after its prompt (default_max_tokens), so only that one must fit.
  const size_t completion = r.max_tokens_given ? size_t(std::max(r.settings.max_tokens, 1)) : 1;
  if (context_length <= 0 || prompt_tokens + completion <= size_t(context_length)) return;
  // vLLM's words, which LangChain and LiteLLM match to tell an overflow from other 400s.
  const std::string n = std::to_string(context_length);
  throw ApiError(
      400, "invalid_request_error",
      "This model's maximum context length is " + n + " tokens. However, you requested " +
          std::to_string(prompt_tokens + completion) + " tokens (" + std::to_string(prompt_tokens) +
          " in the messages, " + std::to_string(completion) +
          " in the completion). Please reduce the length of the messages or "
          "completion.",
      param)
      .with_code("context_length_exceeded");
}

void check_submit_size(const CompletionRequest& r, const json& submit_request,
                       size_t max_frame_bytes) {
  const size_t bytes =
      ipc::make_request(ipc::op::kSubmit, UINT64_MAX, json{{"request", submit_request}})
          .dump(-1, ' ', false, json::error_handler_t::replace)
          .size();
  if (bytes > max_frame_bytes)
    throw bad_param(r.endpoint == Endpoint::ChatCompletions ? "messages" : "prompt",
                    "the request would be " + std::to_string(bytes) +
                        " bytes for the worker, more than its limit of " +
                        std::to_string(max_frame_bytes) + " bytes");
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
  if (s.frequency_penalty != 0.0f) j["frequency_penalty"] = s.frequency_penalty;
  if (s.presence_penalty != 0.0f) j["presence_penalty"] = s.presence_penalty;
  if (!s.logit_bias.empty()) {
    json bias = json::object();
    for (const auto& [id, v] : s.logit_bias) bias[std::to_string(id)] = v;
    j["logit_bias"] = bias;
  }
  if (r.want_logprobs) j["logprobs"] = r.top_logprobs;
  if (!r.cache_salt.empty()) j["cache_salt"] = r.cache_salt;
  put_structured_output(j, r.settings.structured);
  return j;
}

}  // namespace hearth::gateway
