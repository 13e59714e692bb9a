// The CPU engine: the whole Llama-family forward pass in fp32 arithmetic, reading bf16/f16/f32
// weights in place. Simple and exact enough to be the oracle every GPU kernel and proof run is
// checked against; reductions run in a fixed order, so results are the same on every x86-64.
#pragma once

#include <memory>
#include <vector>

#include "worker/engine/backend.h"
#include "worker/engine/model_weights.h"

namespace hearth {

class CpuBackend final : public Backend {
 public:
  // `store` must hold host-resident tensors. `context_length` bounds the KV cache.
  CpuBackend(std::shared_ptr<const WeightStore> store, int context_length);

  std::string name() const override { return "cpu"; }
  int context_length() const override { return context_; }
  void forward(std::span<const int32_t> tokens, int start_pos) override;
  std::span<const float> logits() override { return logits_; }

 private:
  void attention(const LayerWeights& L, int layer, int n, int start_pos);
  void mlp(const LayerWeights& L, int n);

  std::shared_ptr<const WeightStore> store_;
  const ModelConfig& c_;
  ModelWeights w_;
  int context_;
  std::vector<float> inv_freq_;
  std::vector<float> k_cache_, v_cache_;  // [layer][position][kv_dim]
  // Activations for up to n tokens at once.
  std::vector<float> x_, xn_, q_, k_, v_, att_, gate_, up_, scores_, logits_;
};

}  // namespace hearth
