#include "weight-server/model/model_config.h"

#include <cmath>
#include <numbers>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "base/json_limits.h"

namespace hearth {

using json = nlohmann::json;

namespace {

[[noreturn]] void refuse(const std::string& label, const std::string& what) {
  throw std::runtime_error(label + ": " + what);
}

int positive_int(const json& cfg, const char* key, const std::string& label, int max) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) refuse(label, std::string("missing ") + key);
  if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > max)
    refuse(label, std::string(key) + " must be a positive integer of at most " +
                      std::to_string(max) + ", got " + json_excerpt(*it));
  return it->get<int>();
}

// A number that must be a whole count: checked before it is converted, since converting a
// double beyond int's range is undefined.
int positive_count(double v, const char* key, const std::string& label, int max) {
  if (!(v >= 1 && v <= max && v == std::floor(v)))
    refuse(label,
           std::string(key) + " must be a positive integer of at most " + std::to_string(max));
  return static_cast<int>(v);
}

uint64_t mul_saturating(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}
uint64_t add_saturating(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

double number_or(const json& obj, const char* key, double fallback, const std::string& label) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_number())
    refuse(label, std::string(key) + " must be a number, got " + json_excerpt(*it));
  return it->get<double>();
}

bool bool_or(const json& obj, const char* key, bool fallback, const std::string& label) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) refuse(label, std::string(key) + " must be true or false");
  return it->get<bool>();
}

// transformers 5 writes RoPE settings as `rope_parameters`; older configs use `rope_theta` and
// `rope_scaling`. Both describe the same thing.
void parse_rope(const json& cfg, ModelConfig& c, const std::string& label) {
  json params = json::object();
  if (auto it = cfg.find("rope_parameters"); it != cfg.end() && it->is_object()) params = *it;
  if (auto it = cfg.find("rope_scaling"); it != cfg.end() && it->is_object())
    for (const auto& [k, v] : it->items()) params[k] = v;

  c.rope_theta =
      number_or(params, "rope_theta", number_or(cfg, "rope_theta", 10000.0, label), label);
  if (c.rope_theta <= 0) refuse(label, "rope_theta must be positive");

  std::string type = "default";
  if (auto it = params.find("rope_type"); it != params.end() && it->is_string())
    type = it->get<std::string>();
  else if (auto t = params.find("type"); t != params.end() && t->is_string())
    type = t->get<std::string>();

  RopeScaling& s = c.rope_scaling;
  if (type == "default") return;
  s.factor = number_or(params, "factor", 1.0, label);
  if (s.factor <= 0) refuse(label, "rope scaling factor must be positive");
  if (type == "linear") {
    s.kind = RopeScaling::Kind::Linear;
  } else if (type == "llama3") {
    s.kind = RopeScaling::Kind::Llama3;
    s.low_freq_factor = number_or(params, "low_freq_factor", 1.0, label);
    s.high_freq_factor = number_or(params, "high_freq_factor", 4.0, label);
    s.original_max_position =
        positive_count(number_or(params, "original_max_position_embeddings", 8192, label),
                       "original_max_position_embeddings", label, kMaxPositions);
    if (!(s.low_freq_factor > 0) || s.high_freq_factor <= s.low_freq_factor)
      refuse(label, "llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor");
  } else {
    refuse(label,
           "unsupported rope scaling type '" + type + "' (supported: default, linear, llama3)");
  }
}

}  // namespace

std::vector<int> token_id_list(const json& object, const char* key, int vocab,
                               const std::string& label) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return {};
  const auto bound = " (token ids are integers from 0 to " + std::to_string(vocab - 1) +
                     ", below the model's vocab_size " + std::to_string(vocab) + ")";
  const auto id_of = [&](const json& v) {
    if (!v.is_number_integer())
      refuse(label, std::string(key) + " must be a token id or a list of them, got " +
                        v.type_name() + " " + json_excerpt(v, 40) + bound);
    // Unsigned values beyond INT64_MAX read as negative here, and are refused as such.
    const int64_t id =
        v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX) ? -1 : v.get<int64_t>();
    if (id < 0 || id >= vocab)
      refuse(label,
             std::string(key) + " " + json_excerpt(v, 40) + " is outside the vocabulary" + bound);
    return static_cast<int>(id);
  };
  std::vector<int> ids;
  if (it->is_array()) {
    for (const json& v : *it) ids.push_back(id_of(v));
  } else {
    ids.push_back(id_of(*it));
  }
  return ids;
}

const char* architecture_name(Architecture arch) {
  switch (arch) {
    case Architecture::Llama:
      return "LlamaForCausalLM";
    case Architecture::Mistral:
      return "MistralForCausalLM";
    case Architecture::Qwen2:
      return "Qwen2ForCausalLM";
    case Architecture::Qwen3:
      return "Qwen3ForCausalLM";
  }
  return "?";
}

ModelConfig parse_model_config(const json& cfg, const std::string& label) {
  if (!cfg.is_object()) refuse(label, "config is not a JSON object");
  ModelConfig c;
  auto arch_it = cfg.find("architectures");
  if (arch_it == cfg.end() || !arch_it->is_array() || arch_it->size() != 1 ||
      !(*arch_it)[0].is_string())
    refuse(label, "architectures must list exactly one architecture");
  c.architecture_name = (*arch_it)[0].get<std::string>();
  if (c.architecture_name == "LlamaForCausalLM")
    c.arch = Architecture::Llama;
  else if (c.architecture_name == "MistralForCausalLM")
    c.arch = Architecture::Mistral;
  else if (c.architecture_name == "Qwen2ForCausalLM")
    c.arch = Architecture::Qwen2;
  else if (c.architecture_name == "Qwen3ForCausalLM")
    c.arch = Architecture::Qwen3;
  else
    refuse(label, "unsupported architecture " + c.architecture_name +
                      " (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                      "Qwen3ForCausalLM)");

  c.hidden = positive_int(cfg, "hidden_size", label, kMaxModelDim);
  c.intermediate = positive_int(cfg, "intermediate_size", label, kMaxModelDim);
  c.n_layers = positive_int(cfg, "num_hidden_layers", label, kMaxLayers);
  c.n_heads = positive_int(cfg, "num_attention_heads", label, kMaxModelDim);
  c.n_kv_heads = cfg.contains("num_key_value_heads") && !cfg["num_key_value_heads"].is_null()
                     ? positive_int(cfg, "num_key_value_heads", label, kMaxModelDim)
                     : c.n_heads;
  c.vocab = positive_int(cfg, "vocab_size", label, kMaxVocab);
  c.max_position = cfg.contains("max_position_embeddings")
                       ? positive_int(cfg, "max_position_embeddings", label, kMaxPositions)
                       : 2048;
  if (cfg.contains("head_dim") && !cfg["head_dim"].is_null()) {
    c.head_dim = positive_int(cfg, "head_dim", label, kMaxModelDim);
  } else {
    if (c.hidden % c.n_heads != 0)
      refuse(label, "hidden_size is not a multiple of num_attention_heads and head_dim is absent");
    c.head_dim = c.hidden / c.n_heads;
  }
  if (c.n_heads % c.n_kv_heads != 0)
    refuse(label, "num_attention_heads must be a multiple of num_key_value_heads");
  // The q dimension is a product: checked before q_dim() computes it in an int. The kv one is
  // no larger, since num_key_value_heads divides num_attention_heads.
  if (int64_t(c.n_heads) * c.head_dim > kMaxModelDim)
    refuse(label, "num_attention_heads x head_dim (" + std::to_string(c.n_heads) + " x " +
                      std::to_string(c.head_dim) + ") exceeds " + std::to_string(kMaxModelDim));
  if (c.head_dim % 2 != 0) refuse(label, "head_dim must be even for RoPE");
  c.rms_eps = number_or(cfg, "rms_norm_eps", 1e-6, label);
  if (!(c.rms_eps > 0)) refuse(label, "rms_norm_eps must be positive");

  if (auto act = cfg.find("hidden_act"); act != cfg.end() && *act != "silu")
    refuse(label, "unsupported hidden_act " + json_excerpt(*act) + " (supported: silu)");
  if (bool_or(cfg, "mlp_bias", false, label)) refuse(label, "unsupported option mlp_bias=true");

  c.tie_embeddings = bool_or(cfg, "tie_word_embeddings", false, label);
  c.qkv_bias = c.arch == Architecture::Qwen2;
  if (c.arch == Architecture::Llama && bool_or(cfg, "attention_bias", false, label))
    refuse(label, "unsupported option attention_bias=true (it also biases o_proj)");
  if (c.arch == Architecture::Qwen3 && bool_or(cfg, "attention_bias", false, label))
    refuse(label, "unsupported option attention_bias=true for Qwen3ForCausalLM");
  c.qk_norm = c.arch == Architecture::Qwen3;

  if (c.arch == Architecture::Mistral) {
    if (auto sw = cfg.find("sliding_window"); sw != cfg.end() && !sw->is_null())
      c.sliding_window = positive_int(cfg, "sliding_window", label, kMaxPositions);
  }
  if (c.arch == Architecture::Qwen2 || c.arch == Architecture::Qwen3) {
    if (bool_or(cfg, "use_sliding_window", false, label))
      refuse(label, "unsupported option use_sliding_window=true");
  }
  parse_rope(cfg, c, label);
  // Each setting may be in range and the frequencies still overflow (a theta or factor of
  // 1e-320): the table the engine uses is what is checked.
  for (const float f : rope_inverse_frequencies(c))
    if (!std::isfinite(f))
      refuse(label, "rope_theta and the rope scaling give frequencies that are not finite");
  c.bos_ids = token_id_list(cfg, "bos_token_id", c.vocab, label);
  c.eos_ids = token_id_list(cfg, "eos_token_id", c.vocab, label);
  c.quantization = parse_quantization_config(cfg, label);
  if (c.parameter_count() > kMaxParameters)
    refuse(label, "the sizes imply " + std::to_string(c.parameter_count()) +
                      " parameters, more than the " + std::to_string(kMaxParameters) +
                      " hearth accepts");
  return c;
}

uint64_t ModelConfig::parameter_count() const {
  // Within the bounds every term fits in 64 bits; the product with the layer count saturates.
  const uint64_t h = uint64_t(hidden), q = uint64_t(q_dim()), kv = uint64_t(kv_dim());
  uint64_t per_layer = 2 * h * q + 2 * h * kv;  // attention
  per_layer += 3 * h * uint64_t(intermediate);  // SwiGLU MLP
  per_layer += 2 * h;                           // norms
  if (qkv_bias) per_layer += q + 2 * kv;
  if (qk_norm) per_layer += 2 * uint64_t(head_dim);
  uint64_t total = mul_saturating(per_layer, uint64_t(n_layers));
  const uint64_t embeddings = h * uint64_t(vocab) * (tie_embeddings ? 1 : 2);
  return add_saturating(total, embeddings + h);
}

std::vector<float> rope_inverse_frequencies(const ModelConfig& c) {
  const int half = c.head_dim / 2;
  std::vector<float> inv(half);
  const RopeScaling& s = c.rope_scaling;
  for (int i = 0; i < half; ++i) {
    // Matches transformers: the exponent is computed in fp32 from an integer range.
    float f = 1.0f / std::pow(static_cast<float>(c.rope_theta),
                              static_cast<float>(2 * i) / static_cast<float>(c.head_dim));
    if (s.kind == RopeScaling::Kind::Linear) {
      f = static_cast<float>(f / s.factor);
    } else if (s.kind == RopeScaling::Kind::Llama3) {
      const double low_wavelen = s.original_max_position / s.low_freq_factor;
      const double high_wavelen = s.original_max_position / s.high_freq_factor;
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / s.factor);
      } else if (wavelen >= high_wavelen) {
        const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        f = static_cast<float>((1.0 - smooth) * f / s.factor + smooth * f);
      }
    }
    inv[i] = f;
  }
  return inv;
}

}  // namespace hearth
