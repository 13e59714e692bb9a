#include "worker/engine/model_weights.h"

#include <stdexcept>
#include <string>

namespace hearth {

namespace {

WeightRef ref(const StoredTensor& t) {
  WeightRef r{t.data, t.info.dtype, 1, 1, t.info.name};
  if (t.info.shape.size() == 2) {
    r.rows = t.info.shape[0];
    r.cols = t.info.shape[1];
  } else if (t.info.shape.size() == 1) {
    r.cols = t.info.shape[0];
  }
  return r;
}

// An fp8 matrix with its scale tensor, checked to have one value per tensor or per row.
WeightRef scaled_ref(const WeightStore& store, const StoredTensor& t) {
  WeightRef r = ref(t);
  if (!dtype_is_scaled(t.info.dtype)) return r;
  const std::string scale_name = scale_tensor_name(t.info.name);
  const StoredTensor* s = store.find(scale_name);
  if (!s)
    throw std::runtime_error("weight '" + t.info.name + "' is " +
                             std::string(dtype_name(t.info.dtype)) + " but has no scale tensor '" +
                             scale_name + "'");
  const auto count = int64_t(s->info.numel());
  if (dtype_is_scaled(s->info.dtype) || (count != 1 && count != r.rows))
    throw std::runtime_error("scale tensor '" + scale_name + "' is " +
                             std::string(dtype_name(s->info.dtype)) + " " + s->info.shape_string() +
                             "; wanted a 16- or 32-bit float, 1 or " + std::to_string(r.rows) +
                             " values");
  r.scale = s->data;
  r.scale_dtype = s->info.dtype;
  r.scale_count = count;
  return r;
}

}  // namespace

ModelWeights bind_weights(const WeightStore& store) {
  const ModelConfig& c = store.config();
  auto get = [&](const std::string& name) { return scaled_ref(store, store.at(name)); };
  ModelWeights w;
  w.embed = get(std::string(kEmbeddingWeight));
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights L;
    L.attn_norm = get(p + "input_layernorm.weight");
    L.wq = get(p + "self_attn.q_proj.weight");
    L.wk = get(p + "self_attn.k_proj.weight");
    L.wv = get(p + "self_attn.v_proj.weight");
    if (c.qkv_bias) {
      L.bq = get(p + "self_attn.q_proj.bias");
      L.bk = get(p + "self_attn.k_proj.bias");
      L.bv = get(p + "self_attn.v_proj.bias");
    }
    if (c.qk_norm) {
      L.q_norm = get(p + "self_attn.q_norm.weight");
      L.k_norm = get(p + "self_attn.k_norm.weight");
    }
    L.wo = get(p + "self_attn.o_proj.weight");
    L.mlp_norm = get(p + "post_attention_layernorm.weight");
    L.w_gate = get(p + "mlp.gate_proj.weight");
    L.w_up = get(p + "mlp.up_proj.weight");
    L.w_down = get(p + "mlp.down_proj.weight");
    w.layers.push_back(L);
  }
  w.final_norm = get("model.norm.weight");
  w.lm_head = c.tie_embeddings ? w.embed : get("lm_head.weight");
  return w;
}

}  // namespace hearth
