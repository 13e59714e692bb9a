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
#include "worker/engine/engine_options.h"
#include "weight-server/model/model_config.h"
#include "worker/engine/model_weights.h"
#include "worker/engine/rank_collective.h"

namespace hearth {

class CpuBackend final : public Backend {
 public:
  // `store` must hold host-resident tensors. `context_length` bounds each sequence. A pool of
  // `kv.num_blocks` 0 holds one full context. KV memory is reserved, not touched: the pages of
  // blocks never used cost nothing. With `memory` (served mode: a lease from the server) the
  // pool is that memory, as many blocks as it holds at each forward, and kv.num_blocks is
  // ignored; its block_bytes must be kv_bytes_per_token * kv.block_size, or with a memory of
  // `tensor_parallel` ranks (ranked_kv_memory.h) that over the ranks: rank r's holds its heads.
  //
  // `tensor_parallel` N > 1 runs N in-process ranks (issue 26), each on its own piece of every
  // tensor (shard_plan.h, cut from `store`): q/k/v and gate/up rows, the vocabulary's rows of
  // the embedding and LM head per rank, bitwise what one rank computes from the whole matrix;
  // o_proj and down as each rank's partial product over its columns, summed in rank order
  // 0, 1, ..., N-1 (a fixed order, as an all-reduce that adds ranks in order), then added to the
  // residual. `rank_stores` (a model the server sharded; `store` is then rank 0's) are the
  // ranks' pieces, one store each, instead of pieces cut from `store`; there must be
  // `tensor_parallel` of them. So a TP=N engine is deterministic and batch-invariant as TP=1 is,
  // but not equal to it: the split sums round differently.
  //
  // With `group` (one process per rank, rank_collective.h) this backend is rank
  // group->rank() of `tensor_parallel` alone: it holds its own pieces (cut from `store` or
  // rank_stores[rank]), its KV pool holds its KV heads only (the same block count on every rank,
  // so one block table serves all), every rank keeps the whole residual stream, and o_proj's and
  // down's partials are summed across the processes in rank order, so the bits are those of the
  // in-process ranks. Logits are gathered on rank 0 (the leader) only. `rank_stores` may then
  // hold this rank's pieces alone (a served rank imports only its own). A leased `memory` is then
  // this rank's pool alone (a follower), or on the leader every rank's as one (rank 0's its
  // base(), the followers' grown and shrunk over their channels: worker/tp/remote_kv_memory.h).
  CpuBackend(std::shared_ptr<const WeightStore> store, int context_length, KvPoolShape kv = {},
             std::shared_ptr<KvMemory> memory = nullptr, int tensor_parallel = 1,
             std::vector<std::shared_ptr<const WeightStore>> rank_stores = {},
             KvCacheDtype kv_dtype = KvCacheDtype::Auto,
             std::shared_ptr<RankCollective> group = nullptr);

  std::string name() const override { return "cpu"; }
  int tensor_parallel() const {
    return group_ ? group_->world_size() : ranks_.empty() ? 1 : int(ranks_.size());
  }
  int context_length() const override { return context_; }
  int vocab_size() const override { return c_.vocab; }
  KvPoolShape kv_pool() const override;
  KvMemory* kv_memory() override { return memory_.get(); }
  void forward(const ForwardBatch& batch) override;
  std::span<const float> logits(int entry) override;
  std::string failure() const override { return group_ ? group_->failure() : std::string(); }
  std::string probe_failure() override { return group_ ? group_->probe_failure() : std::string(); }

  // Bytes of KV one token position takes (keys and values, every layer): fp32, or with
  // kv_cache_dtype fp8_e4m3 an e4m3 code per number and an fp32 scale per KV head (kv_fp8.h).
  static int64_t kv_bytes_per_token(const ModelConfig& config,
                                    KvCacheDtype kv_dtype = KvCacheDtype::Auto);

 private:
  struct Row {  // one token of the batch
    int entry;
    int pos;
  };
  void attention(const LayerWeights& L, int layer);
  void mlp(const LayerWeights& L, int layer, int n);
  // out[t][...] = each rank's rows of the matrix `get` picks (and its bias), side by side in
  // rank order; with one rank, the whole matrix.
  template <typename Get>
  void column_parallel(float* out, int64_t out_cols, const float* in, int n, Get get);
  // out[t][...] = sum over ranks, in rank order, of rank r's columns of `in` times its piece of
  // the matrix `get` picks; with one rank, the whole product.
  template <typename Get>
  void row_parallel(float* out, const float* in, int64_t in_cols, int n, Get get);
  void embed_row(int32_t token, float* out) const;
  // Slot of (layer, keys 0 | values 1, kv head, offset) inside a block of its pool.
  size_t slot(int layer, int value, int offset, int kv_head) const;
  // Where `block` starts in the pool holding `kv_head`, which becomes its index there.
  std::byte* block_of(int32_t block, int& kv_head) const;
  void store_kv(int layer, int value, int32_t block, int offset, int kv_head, const float* x);
  // fp32 keys or values of one slot: in the pool, or (fp8) decoded into `scratch`.
  const float* load_kv(int layer, int value, int32_t block, int offset, int kv_head,
                       float* scratch) const;

  std::shared_ptr<const WeightStore> store_;
  const ModelConfig& c_;
  ModelWeights w_;
  struct Rank {
    std::shared_ptr<const WeightStore> store;  // its pieces
    ModelWeights w;
  };
  std::vector<Rank> ranks_;  // empty: one rank on the whole store; with group_ its own rank
  std::shared_ptr<RankCollective> group_;
  // This process's heads, KV heads and MLP channels: all of them, or with group_ its rank's.
  int heads_ = 0, kv_heads_ = 0;
  int64_t inter_ = 0;
  std::vector<int32_t> row_tokens_;  // group_: each row's token, for the embedding's gather
  int vocab_per_rank_ = 0;
  std::vector<float> part_in_, part_out_;
  int context_;
  KvPoolShape kv_;
  std::vector<float> inv_freq_;
  std::byte* pool() const;
  // Block-major, so that a pool grows by whole blocks: per block [layer][keys, values][kv_head]
  // [block_offset][head_dim] fp32 numbers; with fp8 KV the same order of e4m3 codes, then the
  // block's fp32 scales in [layer][keys, values][kv_head][block_offset] order.
  std::unique_ptr<std::byte[]> own_pool_;
  std::shared_ptr<KvMemory> memory_;
  bool fp8_kv_ = false;
  // Leased per rank (memory_->ranks() > 1): pool r holds KV heads [r * pool_heads_, ...).
  int kv_pools_ = 1;
  int pool_heads_ = 0;
  size_t block_slots_ = 0;  // (layer, keys | values, kv head, offset) slots per block of a pool
  size_t block_bytes_ = 0;  // one pool's block

  // Activations for the batch's rows.
  std::vector<Row> rows_;
  std::vector<const int32_t*> tables_;  // each row's block table
  std::vector<float> x_, xn_, q_, k_, v_, att_, gate_, up_, scores_, logits_;
  std::vector<const float*> k_rows_, v_rows_;  // one KV head's rows of the sequence, position order
  std::vector<float> k_read_, v_read_;         // fp8: those rows decoded
  std::vector<int> logits_row_;                // entry -> row of logits_, -1 when not wanted
};

}  // namespace hearth
