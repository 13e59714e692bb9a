#include "worker/engine/profile.h"

#include <charconv>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>

#include "base/json_limits.h"
#include "base/key_value_setting.h"
#include "base/read_file.h"
#include "worker/engine/logprobs.h"

namespace hearth {

using json = nlohmann::json;

namespace {

// The double that prints like the float does: 0.8f is 0.800000011920929 as a double, which is
// what a profile said but not what it wrote.
double shortest(float f) {
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, f).ptr;
  *end = '\0';
  return std::strtod(buf, nullptr);
}

[[noreturn]] void bad(const std::string& label, const std::string& key, const std::string& why) {
  throw std::runtime_error(label + ": profile key '" + key + "': " + why);
}

// Request settings are read by type here and checked by request_settings.h's checked_*
// readers, the one place their ranges live; engine options are checked here.
double number(const json& v, const std::string& label, const std::string& key) {
  if (!v.is_number()) bad(label, key, "must be a number, got " + json_excerpt(v));
  return v.get<double>();
}

// An integer as int64_t; one past its range saturates, which every setting's range refuses.
int64_t wide_integer(const json& v, const std::string& label, const std::string& key) {
  if (!v.is_number_integer()) bad(label, key, "must be an integer, got " + json_excerpt(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) return INT64_MAX;
  return v.get<int64_t>();
}

double number(const json& v, const std::string& label, const std::string& key, double lo,
              double hi) {
  const double d = number(v, label, key);
  if (!(d >= lo && d <= hi))
    bad(label, key,
        "must be in [" + json(lo).dump() + ", " + json(hi).dump() + "], got " + json_excerpt(v));
  return d;
}

int64_t integer(const json& v, const std::string& label, const std::string& key, int64_t lo,
                int64_t hi) {
  if (!v.is_number_integer()) bad(label, key, "must be an integer, got " + json_excerpt(v));
  const int64_t i = v.get<int64_t>();
  if (i < lo || i > hi)
    bad(label, key,
        "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
            json_excerpt(v));
  return i;
}

bool boolean(const json& v, const std::string& label, const std::string& key) {
  if (!v.is_boolean()) bad(label, key, "must be true or false, got " + json_excerpt(v));
  return v.get<bool>();
}

template <typename E>
E one_of(const json& v, const std::string& label, const std::string& key) {
  if (v.is_string())
    if (const std::optional<E> e = parse_option<E>(v.get<std::string>())) return *e;
  bad(label, key, "must be one of " + option_choices<E>() + ", got " + json_excerpt(v));
}
enum class KeyKind { Label, Request, Engine };
struct Setter {
  KeyKind kind;
  std::function<void(Profile&, const json&, const std::string&)> set;
};

// Structured output (request_settings.h): a JSON schema (an object, or its text), a regex, or
// any JSON object. The last of them given wins.
void set_guided_json(Profile& p, const json& v, const std::string& l) {
  if (!v.is_object() && !v.is_string() && !v.is_boolean())
    bad(l, "guided_json", "must be a JSON schema (an object) or its text");
  StructuredOutput s{OutputFormat::JsonSchema, v.is_string() ? v.get<std::string>() : v.dump(),
                     p.request.structured.prefix, p.request.structured.suffix};
  check_structured_output(s);
  p.request.structured = std::move(s);
}

void set_guided_regex(Profile& p, const json& v, const std::string& l) {
  if (!v.is_string()) bad(l, "guided_regex", "must be a string");
  StructuredOutput s{OutputFormat::Regex, v.get<std::string>(), p.request.structured.prefix,
                     p.request.structured.suffix};
  check_structured_output(s);
  p.request.structured = std::move(s);
}

void set_guided_json_object(Profile& p, const json& v, const std::string& l) {
  p.request.structured =
      boolean(v, l, "guided_json_object")
          ? StructuredOutput{OutputFormat::JsonObject, "", p.request.structured.prefix,
                             p.request.structured.suffix}
          : StructuredOutput{};
}

// Literal text around the structured output (checked with the format when the request is).
void set_guided_prefix(Profile& p, const json& v, const std::string& l) {
  if (!v.is_string()) bad(l, "guided_prefix", "must be a string");
  p.request.structured.prefix = v.get<std::string>();
}

void set_guided_suffix(Profile& p, const json& v, const std::string& l) {
  if (!v.is_string()) bad(l, "guided_suffix", "must be a string");
  p.request.structured.suffix = v.get<std::string>();
}

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> table = {
      {"name",
       {KeyKind::Label,
        [](Profile& p, const json& v, const std::string& l) {
          if (!v.is_string()) bad(l, "name", "must be a string");
          p.name = v.get<std::string>();
        }}},
      {"temperature",
       {KeyKind::Request,
        [](Profile& p, const json& v, const std::string& l) {
          p.request.sampling.temperature = checked_temperature(number(v, l, "temperature"));
        }}},
      {"top_k",
       {KeyKind::Request,
        [](Profile& p, const json& v, const std::string& l) {
          p.request.sampling.top_k = checked_top_k(wide_integer(v, l, "top_k"));
        }}},
      {"top_p",
       {KeyKind::Request,
        [](Profile& p, const json& v, const std::string& l) {
          p.request.sampling.top_p = checked_top_p(number(v, l, "top_p"));
        }}},
      {"min_p",
       {KeyKind::Request,
        [](Profile& p, const json& v, const std::string& l) {
          p.request.sampling.min_p = checked_min_p(number(v, l, "min_p"));
        }}},
      {"repetition_penalty",
       {KeyKind::Request,
        [](Profile& p, const json& v, const std::string& l) {
          p.request.sampling.repetition_penalty =
              checked_repetition_penalty(number(v, l, "repetition_penalty"));
        }}},
      {"frequency_penalty",
       {KeyKind::Request,
        [](Profile& p, const json& v, const std::string& l) {
          p.request.sampling.frequency_penalty =
              checked_frequency_penalty(number(v, l, "frequency_penalty"));
        }}},
      {"presence_penalty",
       {KeyKind::Request,
        [](Profile& p, const json& v, const std::string& l) {
          p.request.sampling.presence_penalty =
              checked_presence_penalty(number(v, l, "presence_penalty"));
        }}},
      {"logit_bias",
       {KeyKind::Request,
        [](Profile& p, const json& v, const std::string& l) {
          // OpenAI's form: token ids as decimal string keys.
          if (!v.is_object()) bad(l, "logit_bias", "must be an object, got " + json_excerpt(v));
          std::vector<std::pair<int64_t, double>> entries;
          for (const auto& [key, bias] : v.items()) {
            int64_t id = -1;
            const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
            if (ec != std::errc() || end != key.data() + key.size())
              bad(l, "logit_bias", "keys must be token ids, got \"" + key + "\"");
            entries.emplace_back(id, number(bias, l, "logit_bias"));
          }
          p.request.sampling.logit_bias = checked_logit_bias(entries);
        }}},
      {"seed",
       {KeyKind::Request,
        [](Profile& p, const json& v, const std::string& l) {
          // Parsed JSON holds "42" as unsigned, JSON built from a C++ int as signed: both count.
          if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
            bad(l, "seed", "must be an integer >= 0, got " + json_excerpt(v));
          p.request.sampling.seed =
              v.is_number_unsigned() ? v.get<uint64_t>() : uint64_t(v.get<int64_t>());
        }}},
      {"max_tokens",
       {KeyKind::Request,
        [](Profile& p, const json& v, const std::string& l) {
          p.request.max_tokens = checked_max_tokens(wide_integer(v, l, "max_tokens"));
        }}},
      {"stop",
       {KeyKind::Request,
        [](Profile& p, const json& value, const std::string& l) {
          const json v = value.is_string() ? json::array({value}) : value;
          if (!v.is_array()) bad(l, "stop", "must be a string or an array of strings");
          std::vector<std::string> stop;
          for (const json& s : v) {
            if (!s.is_string()) bad(l, "stop", "stop strings must be strings");
            stop.push_back(s.get<std::string>());
          }
          check_stop_strings(stop);
          p.request.stop = std::move(stop);
        }}},
      {"ignore_eos",
       {KeyKind::Request,
        [](Profile& p, const json& v, const std::string& l) {
          p.request.ignore_eos = boolean(v, l, "ignore_eos");
        }}},
      {"logprobs",
       {KeyKind::Request,
        [](Profile& p, const json& v, const std::string& l) {
          p.request.logprobs = checked_logprobs(wide_integer(v, l, "logprobs"));
        }}},
      {"cache_salt",
       {KeyKind::Request,
        [](Profile& p, const json& v, const std::string& l) {
          if (!v.is_string()) bad(l, "cache_salt", "must be a string, got " + v.dump());
          p.request.cache_salt = v.get<std::string>();
        }}},
      {"guided_json", {KeyKind::Request, set_guided_json}},
      {"guided_regex", {KeyKind::Request, set_guided_regex}},
      {"guided_json_object", {KeyKind::Request, set_guided_json_object}},
      {"guided_prefix", {KeyKind::Request, set_guided_prefix}},
      {"guided_suffix", {KeyKind::Request, set_guided_suffix}},
      {"backend",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.backend = one_of<BackendKind>(v, l, "backend");
        }}},
      {"context_length",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.context_length = int(integer(v, l, "context_length", 0, kMaxContextLength));
        }}},
      {"kv_block_size",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.kv_block_size = int(integer(v, l, "kv_block_size", 1, 1024));
        }}},
      {"kv_pool_tokens",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.kv_pool_tokens = integer(v, l, "kv_pool_tokens", 0, int64_t(1) << 40);
        }}},
      {"kv_pool_gb",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.kv_pool_gb = number(v, l, "kv_pool_gb", 0.0, 1e6);
        }}},
      {"kv_pool_fraction",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.kv_pool_fraction = number(v, l, "kv_pool_fraction", 0.0, 1.0);
        }}},
      {"max_batch_tokens",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.max_batch_tokens = int(integer(v, l, "max_batch_tokens", 1, 1 << 20));
        }}},
      {"decode_step_tokens",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.decode_step_tokens = int(integer(v, l, "decode_step_tokens", 0, 1 << 20));
        }}},
      {"max_running",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.max_running = int(integer(v, l, "max_running", 1, 1 << 16));
        }}},
      {"prefix_cache",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.prefix_cache = boolean(v, l, "prefix_cache");
        }}},
      {"kv_share",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.kv_share = boolean(v, l, "kv_share");
        }}},
      {"cuda_engine",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.cuda_engine = one_of<CudaEngineKind>(v, l, "cuda_engine");
        }}},
      {"cuda_graphs",
       {KeyKind::Engine,
        [](Profile& p, const json& v,
           const std::string& l) { p.engine.cuda_graphs = boolean(v, l, "cuda_graphs"); }}},
      {"kv_cache_dtype",
       {KeyKind::Engine,
        [](Profile& p, const json& v,
           const std::string&
               l) { p.engine.kv_cache_dtype = one_of<KvCacheDtype>(v, l, "kv_cache_dtype"); }}},
      {"weights_layout",
       {KeyKind::Engine,
        [](Profile& p, const json& v,
           const std::string&
               l) { p.engine.weights_layout = one_of<WeightsLayout>(v, l, "weights_layout"); }}},
      {"decode_gemv",
       {KeyKind::Engine,
        [](Profile& p, const json& v,
           const std::string&
               l) { p.engine.decode_gemv = one_of<DecodeGemv>(v, l, "decode_gemv"); }}},
      {"matmul_tiling",
       {KeyKind::Engine,
        [](Profile& p, const json& v,
           const std::string&
               l) { p.engine.matmul_tiling = one_of<MatmulTiling>(v, l, "matmul_tiling"); }}},
      {"tensor_parallel",
       {KeyKind::Engine,
        [](Profile& p, const json& v,
           const std::string&
               l) { p.engine.tensor_parallel = int(integer(v, l, "tensor_parallel", 1, 64)); }}},
      {"tensor_parallel_processes",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.tensor_parallel_processes = boolean(v, l, "tensor_parallel_processes");
        }}},
      {"batch_invariant",
       {KeyKind::Engine,
        [](Profile& p, const json& v,
           const std::string& l) { p.engine.batch_invariant = boolean(v, l, "batch_invariant"); }}},
  };
  return table;
}

// A setter's SettingError said as a profile key's error.
void set(const Setter& setter, Profile& profile, const json& value, const std::string& label) {
  try {
    setter.set(profile, value, label);
  } catch (const SettingError& e) {
    bad(label, e.field(), e.reason());
  }
}

}  // namespace

void apply_profile_json(Profile& profile, const json& obj, const std::string& label) {
  if (!obj.is_object()) throw std::runtime_error(label + ": a profile must be a JSON object");
  for (const auto& [key, value] : obj.items()) {
    auto it = setters().find(key);
    if (it == setters().end()) {
      std::string known;
      for (const auto& [k, _] : setters()) known += (known.empty() ? "" : ", ") + k;
      throw std::runtime_error(label + ": unknown profile key '" + key + "' (known: " + known +
                               ")");
    }
    set(it->second, profile, value, label);
  }
}

void apply_request_json(RequestSettings& request, const json& obj, const std::string& label) {
  if (!obj.is_object())
    throw std::runtime_error(label + ": request settings must be a JSON object");
  Profile profile;
  profile.request = request;
  for (const auto& [key, value] : obj.items()) {
    auto it = setters().find(key);
    if (it == setters().end() || it->second.kind == KeyKind::Label) {
      std::string known;
      for (const auto& [k, s] : setters())
        if (s.kind == KeyKind::Request) known += (known.empty() ? "" : ", ") + k;
      throw std::runtime_error(label + ": unknown request setting '" + key + "' (known: " + known +
                               ")");
    }
    if (it->second.kind == KeyKind::Engine)
      throw std::runtime_error(label + ": '" + key +
                               "' is an engine option: it belongs to the worker's profile, not "
                               "to a request");
    set(it->second, profile, value, label);
  }
  request = profile.request;
}

void apply_profile_setting(Profile& profile, std::string_view setting) {
  const std::optional<KeyValueSetting> kv = parse_key_value_setting(setting);
  if (!kv) throw std::runtime_error("--set expects key=value, got '" + std::string(setting) + "'");
  apply_profile_json(profile, json{{kv->key, kv->value}}, "--set");
}

Profile parse_profile(std::string_view text, const std::string& label) {
  Profile p;
  apply_profile_json(p, parse_json(text, label), label);
  return p;
}

Profile load_profile_file(const std::string& path) {
  return parse_profile(read_file(path), path);
}

Profile parse_engine_profile(std::string_view text, const std::string& label) {
  const json obj = parse_json(text, label);
  std::string request_keys;
  if (obj.is_object())
    for (const auto& [key, value] : obj.items())
      if (auto it = setters().find(key);
          it != setters().end() && it->second.kind == KeyKind::Request)
        request_keys += (request_keys.empty() ? "'" : ", '") + key + "'";
  if (!request_keys.empty())
    throw std::runtime_error(label + ": request settings in an engine profile: " + request_keys +
                             " (each request sets them, or the model's generation_config.json "
                             "does; an engine profile holds engine options only)");
  Profile p;
  apply_profile_json(p, obj, label);
  return p;
}

json profile_to_json(const Profile& p) {
  return json{{"name", p.name},
              {"temperature", shortest(p.request.sampling.temperature)},
              {"top_k", p.request.sampling.top_k},
              {"top_p", shortest(p.request.sampling.top_p)},
              {"min_p", shortest(p.request.sampling.min_p)},
              {"repetition_penalty", shortest(p.request.sampling.repetition_penalty)},
              {"seed", p.request.sampling.seed},
              {"max_tokens", p.request.max_tokens},
              {"stop", p.request.stop},
              {"ignore_eos", p.request.ignore_eos},
              {"logprobs", p.request.logprobs},
              {"cache_salt", p.request.cache_salt},
              {"backend", option_name(p.engine.backend)},
              {"context_length", p.engine.context_length},
              {"kv_block_size", p.engine.kv_block_size},
              {"kv_pool_tokens", p.engine.kv_pool_tokens},
              {"kv_pool_gb", p.engine.kv_pool_gb},
              {"kv_pool_fraction", p.engine.kv_pool_fraction},
              {"max_batch_tokens", p.engine.max_batch_tokens},
              {"decode_step_tokens", p.engine.decode_step_tokens},
              {"max_running", p.engine.max_running},
              {"prefix_cache", p.engine.prefix_cache},
              {"kv_share", p.engine.kv_share},
              {"cuda_engine", option_name(p.engine.cuda_engine)},
              {"cuda_graphs", p.engine.cuda_graphs},
              {"kv_cache_dtype", option_name(p.engine.kv_cache_dtype)},
              {"weights_layout", option_name(p.engine.weights_layout)},
              {"decode_gemv", option_name(p.engine.decode_gemv)},
              {"matmul_tiling", option_name(p.engine.matmul_tiling)},
              {"batch_invariant", p.engine.batch_invariant},
              {"tensor_parallel", p.engine.tensor_parallel},
              {"tensor_parallel_processes", p.engine.tensor_parallel_processes}};
}

}  // namespace hearth
