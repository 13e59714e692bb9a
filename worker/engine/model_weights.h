// The model's tensors as the engine addresses them: typed views into a WeightStore, bound by
// Hugging Face name once at start-up. Pointers are host or device addresses, as the store's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "weight-server/model/dtype.h"
#include "weight-server/model/weight_store.h"

namespace hearth {

// A matrix [rows, cols] in row-major order, or a vector (rows == 1). Null when absent.
// An F8_E4M3 matrix carries its scale: `scale_count` values of `scale_dtype`, one for the whole
// tensor or one per row (output channel); element (r, c) is dec(code) * scale[r or 0]. Null
// and 0 for every other dtype.
struct WeightRef {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  std::string_view name;        // the tensor's name in the store (for messages)
  const void* scale = nullptr;  // host or device address, as `data`
  DType scale_dtype = DType::F32;
  int64_t scale_count = 0;  // 1 (per tensor) or rows (per channel)
  // Row r's scale as fp32 (host addresses only).
  float row_scale(int64_t r) const {
    return load_as_f32(scale, scale_dtype, scale_count == 1 ? 0 : size_t(r));
  }
  explicit operator bool() const { return data != nullptr; }
};

// One decoder layer's tensors: the one list every backend reads, whatever it holds them as
// (`Matrix` for the projections, `Vector` for norms and biases). A forward needs, besides these,
// the embedding, the final norm, lm_head (ModelWeights) and the ModelConfig.
template <typename Matrix, typename Vector>
struct LayerTensors {
  Vector attn_norm;
  Matrix wq, wk, wv;
  Vector bq, bk, bv;      // Qwen2 only
  Vector q_norm, k_norm;  // Qwen3 only
  Matrix wo;
  Vector mlp_norm;
  Matrix w_gate, w_up, w_down;

  // The same layer with every matrix passed through `matrix` and every vector through `vector`:
  // a backend's own view, with no member left behind.
  template <typename M, typename V, typename FM, typename FV>
  LayerTensors<M, V> convert(FM&& matrix, FV&& vector) const {
    LayerTensors<M, V> o{};
    o.attn_norm = vector(attn_norm);
    o.wq = matrix(wq), o.wk = matrix(wk), o.wv = matrix(wv);
    o.bq = vector(bq), o.bk = vector(bk), o.bv = vector(bv);
    o.q_norm = vector(q_norm), o.k_norm = vector(k_norm);
    o.wo = matrix(wo);
    o.mlp_norm = vector(mlp_norm);
    o.w_gate = matrix(w_gate), o.w_up = matrix(w_up), o.w_down = matrix(w_down);
    return o;
  }
};

// As the store holds them (the CPU backend reads these directly).
using LayerWeights = LayerTensors<WeightRef, WeightRef>;

struct ModelWeights {
  WeightRef embed;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  WeightRef final_norm;
  WeightRef lm_head;  // the embedding itself when tied
};

// Binds every tensor by name; an F8_E4M3 matrix `<module>.weight` also binds its scale tensor
// `<module>.weight_scale` (which must hold 1 or `rows` elements).
ModelWeights bind_weights(const WeightStore& store);

// The name of the scale tensor beside an fp8 weight: "<module>.weight" -> "<module>.weight_scale".
inline std::string scale_tensor_name(std::string_view weight_name) {
  return std::string(weight_name) + "_scale";
}

// The token embedding's name in every supported architecture. Its dtype is the 16-bit type the
// CUDA engine computes in.
inline constexpr std::string_view kEmbeddingWeight = "model.embed_tokens.weight";

}  // namespace hearth
