#include "weight-server/model/quantization_config.h"

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "base/json_limits.h"

namespace hearth {

using json = nlohmann::json;

namespace {

[[noreturn]] void refuse(const std::string& label, const std::string& what) {
  throw std::runtime_error(label + ": quantization_config: " + what +
                           " (hearth reads compressed-tensors FP8-dynamic: float-quantized e4m3 "
                           "weights, channel or tensor scales, dynamic per-token activations)");
}

// `obj[key]` as the JSON value `want` demands, else a refusal naming key, value and wish.
void expect(const json& obj, const char* where, const char* key, const json& want,
            const std::string& label) {
  const auto it = obj.find(key);
  const json got = it == obj.end() ? json(nullptr) : *it;
  if (got != want)
    refuse(label,
           std::string(where) + "." + key + " is " + json_excerpt(got) + ", not " + want.dump());
}

// Absent or null.
bool absent(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null();
}

void check_weights(const json& w, QuantizationConfig& q, const std::string& label) {
  if (!w.is_object()) refuse(label, "weights is " + json_excerpt(w) + ", not an object");
  if (w.value("type", json()) != "float")
    refuse(label, "weights.type " + json_excerpt(w.value("type", json())) +
                      " (integer weights are not supported)");
  expect(w, "weights", "num_bits", 8, label);
  const json strategy = w.value("strategy", json());
  if (strategy == "channel")
    q.strategy = QuantizationConfig::Strategy::Channel;
  else if (strategy == "tensor")
    q.strategy = QuantizationConfig::Strategy::Tensor;
  else
    refuse(label, "weights.strategy " + json_excerpt(strategy) +
                      " (supported: channel, tensor; not group or block)");
  expect(w, "weights", "symmetric", true, label);
  expect(w, "weights", "dynamic", false, label);
  if (!absent(w, "group_size")) refuse(label, "weights.group_size is set (group strategy)");
  if (!absent(w, "block_structure")) refuse(label, "weights.block_structure is set (block)");
}

void check_activations(const json& a, const std::string& label) {
  if (a.is_null())
    refuse(label, "no input_activations (weight-only fp8: hearth computes W8A8 only)");
  if (!a.is_object()) refuse(label, "input_activations is " + json_excerpt(a));
  if (a.value("type", json()) != "float")
    refuse(label, "input_activations.type " + json_excerpt(a.value("type", json())));
  expect(a, "input_activations", "num_bits", 8, label);
  if (a.value("dynamic", json()) != true)
    refuse(label, "input_activations.dynamic is " + json_excerpt(a.value("dynamic", json())) +
                      " (static input scales are not supported)");
  expect(a, "input_activations", "strategy", "token", label);
}

}  // namespace

QuantizationConfig parse_quantization_config(const json& config, const std::string& label) {
  QuantizationConfig q;
  if (!config.is_object() || absent(config, "quantization_config")) return q;
  const json& qc = config["quantization_config"];
  if (!qc.is_object()) refuse(label, "is " + json_excerpt(qc) + ", not an object");
  const json method = qc.value("quant_method", json());
  if (method != "compressed-tensors")
    refuse(label, "quant_method " + json_excerpt(method) + " is not supported");
  const json format = qc.value("format", json());
  if (format != "float-quantized")
    refuse(label, "format " + json_excerpt(format) + " is not supported");
  const json groups = qc.value("config_groups", json());
  if (!groups.is_object() || groups.size() != 1)
    refuse(label, "config_groups must hold exactly one group, got " + json_excerpt(groups));
  const json& group = groups.begin().value();
  if (!group.is_object()) refuse(label, "config_groups' group is " + json_excerpt(group));
  if (group.value("targets", json()) != json::array({"Linear"}))
    refuse(label, "targets " + json_excerpt(group.value("targets", json())) +
                      " (supported: [\"Linear\"])");
  check_weights(group.value("weights", json()), q, label);
  check_activations(group.value("input_activations", json()), label);
  if (!absent(group, "output_activations")) refuse(label, "output_activations are quantized");
  if (!absent(qc, "kv_cache_scheme")) refuse(label, "kv_cache_scheme is set (fp8 KV scales)");
  // The head stays 16-bit; excluding any projection would leave a partly quantized model.
  if (const auto it = qc.find("ignore"); it != qc.end() && !it->is_null()) {
    if (!it->is_array()) refuse(label, "ignore is " + json_excerpt(*it));
    for (const json& name : *it)
      if (!name.is_string() || !name.get<std::string>().ends_with("lm_head"))
        refuse(label, "ignore lists " + json_excerpt(name) + " (only lm_head may stay 16-bit)");
  }
  q.weights = QuantizationConfig::Weights::Fp8;
  return q;
}

json quantization_config_json(const QuantizationConfig& q) {
  if (!q.fp8()) return nullptr;
  const char* strategy = q.strategy == QuantizationConfig::Strategy::Channel ? "channel" : "tensor";
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights",
               {{"num_bits", 8},
                {"type", "float"},
                {"strategy", strategy},
                {"symmetric", true},
                {"dynamic", false}}},
              {"input_activations",
               {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}}}}}}},
          {"ignore", {"lm_head"}}};
}

bool is_quantized_projection(std::string_view name) {
  if (!name.starts_with("model.layers.")) return false;
  for (std::string_view p :
       {".self_attn.q_proj.weight", ".self_attn.k_proj.weight", ".self_attn.v_proj.weight",
        ".self_attn.o_proj.weight", ".mlp.gate_proj.weight", ".mlp.up_proj.weight",
        ".mlp.down_proj.weight"})
    if (name.ends_with(p)) return true;
  return false;
}

}  // namespace hearth
