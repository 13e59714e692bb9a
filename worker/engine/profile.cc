#include "worker/engine/profile.h"

#include <charconv>
#include <cstdlib>
#include <functional>
#include <map>
#include <stdexcept>

#include "base/json_limits.h"
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

double number(const json& v, const std::string& label, const std::string& key, double lo,
              double hi) {
  if (!v.is_number()) bad(label, key, "must be a number, got " + json_excerpt(v));
  const double d = v.get<double>();
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

std::string one_of(const json& v, const std::string& label, const std::string& key,
                   std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
  if (v.is_string())
    for (const char* a : allowed)
      if (v.get<std::string>() == a) return a;
  bad(label, key, "must be one of " + list + ", got " + json_excerpt(v));
}

enum class KeyKind { Label, Request, Engine };
struct Setter {
  KeyKind kind;
  std::function<void(Profile&, const json&, const std::string&)> set;
};

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
          p.request.sampling.temperature = float(number(v, l, "temperature", 0.0, 100.0));
        }}},
      {"top_k",
       {KeyKind::Request,
        [](Profile& p, const json& v, const std::string& l) {
          p.request.sampling.top_k = int(integer(v, l, "top_k", 0, kMaxTopK));
        }}},
      {"top_p",
       {KeyKind::Request,
        [](Profile& p, const json& v, const std::string& l) {
          p.request.sampling.top_p = float(number(v, l, "top_p", 0.0, 1.0));
          if (p.request.sampling.top_p <= 0.0f) bad(l, "top_p", "must be greater than 0");
        }}},
      {"min_p",
       {KeyKind::Request,
        [](Profile& p, const json& v, const std::string& l) {
          p.request.sampling.min_p = float(number(v, l, "min_p", 0.0, 1.0));
        }}},
      {"repetition_penalty",
       {KeyKind::Request,
        [](Profile& p, const json& v, const std::string& l) {
          p.request.sampling.repetition_penalty =
              float(number(v, l, "repetition_penalty", 1e-3, 100.0));
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
          p.request.max_tokens = int(integer(v, l, "max_tokens", 0, kMaxTokensLimit));
        }}},
      {"stop",
       {KeyKind::Request,
        [](Profile& p, const json& value, const std::string& l) {
          p.request.stop.clear();
          const json v = value.is_string() ? json::array({value}) : value;
          if (!v.is_array()) bad(l, "stop", "must be a string or an array of strings");
          for (const json& s : v) {
            if (!s.is_string() || s.get<std::string>().empty())
              bad(l, "stop", "stop strings must be non-empty strings");
            p.request.stop.push_back(s.get<std::string>());
          }
        }}},
      {"ignore_eos",
       {KeyKind::Request,
        [](Profile& p, const json& v, const std::string& l) {
          p.request.ignore_eos = boolean(v, l, "ignore_eos");
        }}},
      {"logprobs",
       {KeyKind::Request,
        [](Profile& p, const json& v, const std::string& l) {
          p.request.logprobs = int(integer(v, l, "logprobs", 0, kMaxTopLogprobs));
        }}},
      {"cache_salt",
       {KeyKind::Request,
        [](Profile& p, const json& v, const std::string& l) {
          if (!v.is_string()) bad(l, "cache_salt", "must be a string, got " + v.dump());
          p.request.cache_salt = v.get<std::string>();
        }}},
      {"backend",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.backend = one_of(v, l, "backend", {"auto", "cpu", "cuda"});
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
      {"cuda_engine",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.cuda_engine = one_of(v, l, "cuda_engine", {"batched", "single"});
        }}},
      {"cuda_graphs",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.cuda_graphs = boolean(v, l, "cuda_graphs");
        }}},
      {"kv_cache_dtype",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.kv_cache_dtype = one_of(v, l, "kv_cache_dtype", {"auto", "bf16", "f16"});
        }}},
      {"weights_layout",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.weights_layout = one_of(v, l, "weights_layout", {"per-tensor", "packed"});
        }}},
      {"decode_gemv",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.decode_gemv = one_of(v, l, "decode_gemv", {"hearth", "cublas"});
        }}},
      {"matmul_tiling",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.matmul_tiling = one_of(v, l, "matmul_tiling", {"auto", "tuned"});
        }}},
      {"batch_invariant",
       {KeyKind::Engine,
        [](Profile& p, const json& v, const std::string& l) {
          p.engine.batch_invariant = boolean(v, l, "batch_invariant");
        }}},
  };
  return table;
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
    it->second.set(profile, value, label);
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
    it->second.set(profile, value, label);
  }
  request = profile.request;
}

Profile parse_profile(std::string_view text, const std::string& label) {
  Profile p;
  apply_profile_json(p, parse_json(text, label), label);
  return p;
}

Profile load_profile_file(const std::string& path) {
  return parse_profile(read_file(path), path);
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
              {"backend", p.engine.backend},
              {"context_length", p.engine.context_length},
              {"kv_block_size", p.engine.kv_block_size},
              {"kv_pool_tokens", p.engine.kv_pool_tokens},
              {"kv_pool_gb", p.engine.kv_pool_gb},
              {"kv_pool_fraction", p.engine.kv_pool_fraction},
              {"max_batch_tokens", p.engine.max_batch_tokens},
              {"max_running", p.engine.max_running},
              {"prefix_cache", p.engine.prefix_cache},
              {"cuda_engine", p.engine.cuda_engine},
              {"cuda_graphs", p.engine.cuda_graphs},
              {"kv_cache_dtype", p.engine.kv_cache_dtype},
              {"weights_layout", p.engine.weights_layout},
              {"decode_gemv", p.engine.decode_gemv},
              {"matmul_tiling", p.engine.matmul_tiling},
              {"batch_invariant", p.engine.batch_invariant}};
}

}  // namespace hearth
