// The model's tensors as the engine addresses them: typed views into a WeightStore, bound by
// Hugging Face name once at start-up. Pointers are host or device addresses, as the store's.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "weight-server/model/dtype.h"
#include "weight-server/model/weight_store.h"

namespace hearth {

// A matrix [rows, cols] in row-major order, or a vector (rows == 1). Null when absent.
struct WeightRef {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  std::string_view name;  // the tensor's name in the store (for messages)
  explicit operator bool() const { return data != nullptr; }
};

struct LayerWeights {
  WeightRef attn_norm;
  WeightRef wq, wk, wv;
  WeightRef bq, bk, bv;      // Qwen2 only
  WeightRef q_norm, k_norm;  // Qwen3 only
  WeightRef wo;
  WeightRef mlp_norm;
  WeightRef w_gate, w_up, w_down;
};

struct ModelWeights {
  WeightRef embed;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  WeightRef final_norm;
  WeightRef lm_head;  // the embedding itself when tied
};

ModelWeights bind_weights(const WeightStore& store);

// The token embedding's name in every supported architecture. Its dtype is the 16-bit type the
// CUDA engine computes in.
inline constexpr std::string_view kEmbeddingWeight = "model.embed_tokens.weight";

}  // namespace hearth
