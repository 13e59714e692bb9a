// The architecture of a Llama-family model, read from a Hugging Face config.json. Everything
// the engine needs to know about shapes and numerics lives here; anything hearth does not
// implement is refused at parse time with a message that names it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "weight-server/model/quantization_config.h"

namespace hearth {

enum class Architecture { Llama, Mistral, Qwen2, Qwen3 };

// Bounds no real model comes near (the largest have hidden sizes of 16384, 126 layers and
// vocabularies of 256k). Within them every size derived from a config fits an int (a row:
// hidden, the q and kv dimensions, intermediate) and every tensor's element count a uint64, so
// no product wraps, and the list of tensors a config implies stays short, so it is built and
// compared before anything large is allocated. parse_model_config refuses anything beyond, for
// the server and the worker alike.
inline constexpr int kMaxModelDim = 1 << 20;  // hidden, intermediate, heads x head_dim
inline constexpr int kMaxLayers = 1024;
inline constexpr int kMaxVocab = 1 << 24;
inline constexpr int kMaxPositions = 1 << 30;
inline constexpr uint64_t kMaxParameters = uint64_t{1} << 42;

struct RopeScaling {
  enum class Kind { None, Linear, Llama3 } kind = Kind::None;
  double factor = 1.0;
  double low_freq_factor = 1.0;      // llama3 only
  double high_freq_factor = 4.0;     // llama3 only
  int original_max_position = 8192;  // llama3 only
};

struct ModelConfig {
  Architecture arch = Architecture::Llama;
  std::string architecture_name;  // as written in config.json, e.g. "LlamaForCausalLM"
  int hidden = 0;
  int intermediate = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int vocab = 0;
  int max_position = 0;
  int sliding_window = 0;  // 0: none. Contexts are capped at it rather than windowed.
  double rms_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_embeddings = false;
  bool qkv_bias = false;  // Qwen2, or Llama with attention_bias
  bool qk_norm = false;   // Qwen3: RMSNorm over each head of q and k before RoPE
  std::vector<int> bos_ids;
  std::vector<int> eos_ids;
  QuantizationConfig quantization;  // fp8 decoder projections, or none

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  uint64_t parameter_count() const;  // saturates at UINT64_MAX
};

// Parses config.json content, refusing sizes beyond the bounds above. `label` names the file in
// errors.
ModelConfig parse_model_config(const nlohmann::json& config, const std::string& label);

// The token ids under `key` (bos_token_id, eos_token_id): none if absent or null, else one id
// or a list of them, each in [0, vocab). Anything else is refused with a message that names
// `label` (the file), the key and the bound.
std::vector<int> token_id_list(const nlohmann::json& object, const char* key, int vocab,
                               const std::string& label);

// The inverse frequencies RoPE rotates head dimension pairs (i, i + head_dim/2) by, including
// any scaling. One table shared by the CPU engine and the CUDA kernels.
std::vector<float> rope_inverse_frequencies(const ModelConfig& config);

const char* architecture_name(Architecture arch);

}  // namespace hearth
