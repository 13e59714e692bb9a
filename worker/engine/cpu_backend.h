// The CPU engine: the whole Llama-family forward pass in fp32 arithmetic, reading bf16/f16/f32
// weights in place (fp8 projections by the W8A8 formula, cpu_matmul.h), over a batch of
// sequences whose keys and values live in a paged pool.
// Simple and exact enough to be the oracle every GPU kernel and proof run is checked against;
// reductions run in a fixed order, so results are the same on every x86-64.
//
// Every token row is computed on its own: the projections convert each weight row once and
// take its dot product with every row of the batch, and attention reads a row's own sequence
// only, position by position. A row's result is therefore bit-identical however the batch
// around it is made up or its prompt chunked.
#pragma once

#include <memory>
#include <vector>

#include "worker/engine/backend.h"
#include "worker/engine/model_weights.h"

namespace hearth {

class CpuBackend final : public Backend {
 public:
  // `store` must hold host-resident tensors. `context_length` bounds each sequence. A pool of
  // `kv.num_blocks` 0 holds one full context. KV memory is reserved, not touched: the pages of
  // blocks never used cost nothing. With `memory` (served mode: a lease from the server) the
  // pool is that memory, as many blocks as it holds at each forward, and kv.num_blocks is
  // ignored; its block_bytes must be kv_bytes_per_token * kv.block_size.
  CpuBackend(std::shared_ptr<const WeightStore> store, int context_length, KvPoolShape kv = {},
             std::shared_ptr<KvMemory> memory = nullptr);

  std::string name() const override { return "cpu"; }
  int context_length() const override { return context_; }
  int vocab_size() const override { return c_.vocab; }
  KvPoolShape kv_pool() const override;
  KvMemory* kv_memory() override { return memory_.get(); }
  void forward(const ForwardBatch& batch) override;
  std::span<const float> logits(int entry) override;

  // Bytes of KV one token position takes (keys and values, every layer, fp32).
  static int64_t kv_bytes_per_token(const ModelConfig& config);

 private:
  struct Row {  // one token of the batch
    int entry;
    int pos;
  };
  void attention(const LayerWeights& L, int layer);
  void mlp(const LayerWeights& L, int n);
  float* k_slot(int layer, int32_t block, int offset, int kv_head) const;
  float* v_slot(int layer, int32_t block, int offset, int kv_head) const;

  std::shared_ptr<const WeightStore> store_;
  const ModelConfig& c_;
  ModelWeights w_;
  int context_;
  KvPoolShape kv_;
  std::vector<float> inv_freq_;
  float* pool() const;
  // Block-major, so that a pool grows by whole blocks: per block [layer][keys, values][kv_head]
  // [block_offset][head_dim].
  std::unique_ptr<float[]> own_pool_;
  std::shared_ptr<KvMemory> memory_;
  size_t block_floats_ = 0;  // floats per block, every layer's keys and values

  // Activations for the batch's rows.
  std::vector<Row> rows_;
  std::vector<const int32_t*> tables_;  // each row's block table
  std::vector<float> x_, xn_, q_, k_, v_, att_, gate_, up_, scores_, logits_;
  std::vector<int> logits_row_;  // entry -> row of logits_, -1 when not wanted
};

}  // namespace hearth
