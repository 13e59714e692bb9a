// Tensor parallelism's split of a model (issue 26): for a config and N ranks, which slice of
// every tensor rank r holds. Attention is split by whole KV heads (q heads follow their kv heads
// under GQA), the MLP by intermediate channels, the embedding and LM head by vocabulary rows;
// norms are replicated. HF stores a linear layer's weight as [out, in], so a column-parallel
// layer (q/k/v, gate/up; Qwen2's q/k/v biases with them) keeps a range of rows and a
// row-parallel one (o_proj, down) a range of columns, whose partial products the ranks sum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "weight-server/model/model_config.h"

namespace hearth {

// How a tensor is cut: by rows (dim 0), by columns (dim 1 of a matrix), or not at all.
enum class ShardSplit { Replicated, Rows, Columns };

const char* shard_split_name(ShardSplit split);  // "replicated", "rows", "columns"

// The half-open range [begin, end) of the split dimension a rank holds; a replicated tensor's
// range is its whole dim 0.
struct TensorSlice {
  ShardSplit split = ShardSplit::Replicated;
  int64_t begin = 0;
  int64_t end = 0;
  bool operator==(const TensorSlice&) const = default;
};

struct TensorShard {
  std::string name;                 // the unsharded tensor's name
  std::vector<int64_t> full_shape;  // as expected_tensors() gives it
  std::vector<int64_t> shape;       // of the rank's piece
  TensorSlice slice;
};

// What one rank computes, in model units.
struct RankDims {
  int q_heads = 0;       // heads [rank * q_heads, (rank + 1) * q_heads)
  int kv_heads = 0;      // likewise
  int intermediate = 0;  // channels [rank * intermediate, ...)
  int vocab_begin = 0;   // vocabulary rows [vocab_begin, vocab_end)
  int vocab_end = 0;
};

class ShardPlan {
 public:
  // Throws std::runtime_error (naming the count that does not divide) when `ranks` is not in
  // 1..kMaxTensorParallel, does not divide the KV heads (so also the q heads) or the
  // intermediate size, or leaves a rank without vocabulary rows.
  static ShardPlan make(const ModelConfig& config, int ranks);

  int ranks() const { return ranks_; }
  // Rows of the embedding and LM head per rank, ceil(vocab / ranks); the last rank holds the
  // remainder (fewer rows, never padding: the gathered logits are exactly `vocab` wide).
  int vocab_per_rank() const { return vocab_per_rank_; }
  RankDims dims(int rank) const;
  // Every tensor of the model, in expected_tensors() order, as rank `rank` holds it.
  const std::vector<TensorShard>& tensors(int rank) const { return tensors_.at(size_t(rank)); }

 private:
  int ranks_ = 1;
  int vocab_per_rank_ = 0;
  std::vector<RankDims> dims_;
  std::vector<std::vector<TensorShard>> tensors_;
};

inline constexpr int kMaxTensorParallel = 64;

// Bytes of `shard`'s piece for elements of `element_bytes`.
uint64_t shard_bytes(const TensorShard& shard, size_t element_bytes);

// Copies `shard`'s piece out of the whole row-major tensor `full` into `out` (shard_bytes()
// long), rows contiguous.
void copy_shard(const TensorShard& shard, size_t element_bytes, std::span<const std::byte> full,
                std::span<std::byte> out);

}  // namespace hearth
