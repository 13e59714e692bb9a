// config.json's `quantization_config`: which weights are stored quantized and how. hearth reads
// one scheme, compressed-tensors "FP8-dynamic" (e4m3 weights with per-channel or per-tensor
// scales, activations quantized per token at run time); every other scheme is refused by name
// at load, never half-read.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace hearth {

struct QuantizationConfig {
  enum class Weights { None, Fp8 };
  enum class Strategy { Channel, Tensor };  // one scale per output row, or one per tensor
  Weights weights = Weights::None;
  Strategy strategy = Strategy::Channel;

  bool fp8() const { return weights == Weights::Fp8; }
  bool operator==(const QuantizationConfig&) const = default;
};

// What hearth-synth --dtype fp8 and quantize-at-load make: fp8 with per-channel scales.
inline constexpr QuantizationConfig kFp8PerChannel{QuantizationConfig::Weights::Fp8,
                                                   QuantizationConfig::Strategy::Channel};

// Reads `quantization_config` from a whole config.json object (None when absent or null).
// Throws std::runtime_error naming `label` and what is not supported.
QuantizationConfig parse_quantization_config(const nlohmann::json& config,
                                             const std::string& label);

// The compressed-tensors description of `q` (null for None), as config.json holds it.
nlohmann::json quantization_config_json(const QuantizationConfig& q);

// Whether a tensor of this name is one of the seven decoder projections a quantized model
// stores in fp8 ("model.layers.N.self_attn.q_proj.weight", ... "mlp.down_proj.weight").
bool is_quantized_projection(std::string_view tensor_name);

}  // namespace hearth
