// quantization_config: the compressed-tensors FP8-dynamic scheme is read; every other scheme,
// and every variant of this one hearth does not compute, is refused naming what it is.
#include "weight-server/model/quantization_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace hearth {
namespace {

using json = nlohmann::json;

json with(const json& quantization) {
  return {{"model_type", "llama"}, {"quantization_config", quantization}};
}

// Expects a refusal whose message holds `fragment`.
void expect_refused(const json& quantization, const std::string& fragment) {
  try {
    parse_quantization_config(with(quantization), "config.json");
    FAIL() << "accepted " << quantization.dump();
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("config.json: quantization_config"), std::string::npos) << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
  }
}

TEST(QuantizationConfig, AbsentOrNullIsNone) {
  EXPECT_FALSE(parse_quantization_config(json{{"model_type", "llama"}}, "c").fp8());
  EXPECT_FALSE(parse_quantization_config(with(nullptr), "c").fp8());
}

TEST(QuantizationConfig, ReadsWhatItWritesForBothStrategies) {
  const QuantizationConfig channel =
      parse_quantization_config(with(quantization_config_json(kFp8PerChannel)), "config.json");
  EXPECT_EQ(channel, kFp8PerChannel);
  const QuantizationConfig per_tensor{QuantizationConfig::Weights::Fp8,
                                      QuantizationConfig::Strategy::Tensor};
  EXPECT_EQ(parse_quantization_config(with(quantization_config_json(per_tensor)), "c"), per_tensor);
  EXPECT_TRUE(quantization_config_json(QuantizationConfig{}).is_null());
}

TEST(QuantizationConfig, ReadsAPublishedFp8DynamicConfig) {
  // As llm-compressor writes it for Llama-3.1-8B-Instruct-FP8-dynamic (extra keys included).
  const json q = json::parse(R"({
    "config_groups": {"group_0": {
      "input_activations": {"actorder": null, "block_structure": null, "dynamic": true,
        "group_size": null, "num_bits": 8, "observer": null, "observer_kwargs": {},
        "strategy": "token", "symmetric": true, "type": "float"},
      "output_activations": null, "targets": ["Linear"],
      "weights": {"actorder": null, "block_structure": null, "dynamic": false,
        "group_size": null, "num_bits": 8, "observer": "minmax", "observer_kwargs": {},
        "strategy": "channel", "symmetric": true, "type": "float"}}},
    "format": "float-quantized", "global_compression_ratio": 1.24,
    "ignore": ["lm_head"], "kv_cache_scheme": null, "quant_method": "compressed-tensors",
    "quantization_status": "compressed"})");
  EXPECT_EQ(parse_quantization_config(with(q), "c"), kFp8PerChannel);
}

TEST(QuantizationConfig, RefusesOtherSchemesByName) {
  const json good = quantization_config_json(kFp8PerChannel);
  auto changed = [&](const json::json_pointer& at, const json& value) {
    json q = good;
    q[at] = value;
    return q;
  };
  expect_refused(json{{"quant_method", "gptq"}, {"bits", 4}}, "quant_method \"gptq\"");
  expect_refused(json{{"quant_method", "awq"}}, "quant_method \"awq\"");
  expect_refused(json{{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}},
                 "quant_method \"fp8\"");
  expect_refused(json::array(), "not an object");
  expect_refused(changed("/format"_json_pointer, "pack-quantized"), "format \"pack-quantized\"");
  expect_refused(changed("/config_groups/group_0/weights/type"_json_pointer, "int"),
                 "weights.type \"int\"");
  expect_refused(changed("/config_groups/group_0/weights/num_bits"_json_pointer, 4),
                 "weights.num_bits is 4");
  expect_refused(changed("/config_groups/group_0/weights/strategy"_json_pointer, "group"),
                 "weights.strategy \"group\"");
  expect_refused(changed("/config_groups/group_0/weights/strategy"_json_pointer, "block"),
                 "weights.strategy \"block\"");
  expect_refused(changed("/config_groups/group_0/weights/symmetric"_json_pointer, false),
                 "weights.symmetric is false");
  expect_refused(changed("/config_groups/group_0/input_activations/dynamic"_json_pointer, false),
                 "static input scales");
  expect_refused(changed("/config_groups/group_0/input_activations"_json_pointer, nullptr),
                 "weight-only fp8");
  expect_refused(
      changed("/config_groups/group_0/input_activations/strategy"_json_pointer, "tensor"),
      "input_activations.strategy is \"tensor\"");
  expect_refused(changed("/kv_cache_scheme"_json_pointer, json{{"num_bits", 8}}),
                 "kv_cache_scheme");
  expect_refused(changed("/ignore"_json_pointer, json{"lm_head", "model.layers.0.mlp.down_proj"}),
                 "model.layers.0.mlp.down_proj");
  json two = good;
  two["config_groups"]["group_1"] = two["config_groups"]["group_0"];
  expect_refused(two, "exactly one group");
}

TEST(QuantizationConfig, NamesTheSevenProjections) {
  EXPECT_TRUE(is_quantized_projection("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_TRUE(is_quantized_projection("model.layers.31.mlp.down_proj.weight"));
  EXPECT_FALSE(is_quantized_projection("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_FALSE(is_quantized_projection("model.layers.0.input_layernorm.weight"));
  EXPECT_FALSE(is_quantized_projection("model.embed_tokens.weight"));
  EXPECT_FALSE(is_quantized_projection("lm_head.weight"));
}

}  // namespace
}  // namespace hearth
