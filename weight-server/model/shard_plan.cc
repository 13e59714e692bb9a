#include "weight-server/model/shard_plan.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include "weight-server/model/hf_model.h"

namespace hearth {

namespace {

[[noreturn]] void refuse(int ranks, const std::string& why) {
  throw std::runtime_error("tensor parallel " + std::to_string(ranks) + ": " + why);
}

// The piece of `t` that rank `r` keeps, chosen by the suffix of its name (expected_tensors()
// names every tensor the loader accepts, so a name matched by none is a bug here).
TensorShard shard_of(const ExpectedTensor& t, const ModelConfig& c, int r, const RankDims& d) {
  TensorShard s{t.name, t.shape, t.shape, {ShardSplit::Replicated, 0, t.shape[0]}};
  const std::string_view name = t.name;
  auto ends = [&](std::string_view suffix) { return name.ends_with(suffix); };
  auto cut = [&](ShardSplit split, int64_t per_rank) {
    s.slice = {split, r * per_rank, (r + 1) * per_rank};
    s.shape[split == ShardSplit::Rows ? 0 : 1] = per_rank;
  };
  const int64_t q = int64_t(d.q_heads) * c.head_dim, kv = int64_t(d.kv_heads) * c.head_dim;
  // An fp8 projection's scales ([out, 1] per channel, [1] per tensor) follow its output rows:
  // a column-parallel layer's rank keeps its rows' scales; a row-parallel one (o, down) keeps
  // every output row, so its whole vector: the codes and scales of TP=1, cut by K.
  if (name.ends_with(".weight_scale")) {
    const bool per_channel = t.shape.size() == 2;
    if (per_channel && (ends("q_proj.weight_scale") || ends("gate_proj.weight_scale") ||
                        ends("up_proj.weight_scale")))
      cut(ShardSplit::Rows, ends("q_proj.weight_scale") ? q : d.intermediate);
    else if (per_channel && (ends("k_proj.weight_scale") || ends("v_proj.weight_scale")))
      cut(ShardSplit::Rows, kv);
    else if (!ends("o_proj.weight_scale") && !ends("down_proj.weight_scale") && per_channel)
      throw std::logic_error("shard plan: no rule for tensor '" + t.name + "'");
    return s;
  }
  if (ends("embed_tokens.weight") || name == "lm_head.weight") {
    s.slice = {ShardSplit::Rows, d.vocab_begin, d.vocab_end};
    s.shape[0] = d.vocab_end - d.vocab_begin;
  } else if (ends("q_proj.weight") || ends("q_proj.bias")) {
    cut(ShardSplit::Rows, q);
  } else if (ends("k_proj.weight") || ends("k_proj.bias") || ends("v_proj.weight") ||
             ends("v_proj.bias")) {
    cut(ShardSplit::Rows, kv);
  } else if (ends("o_proj.weight")) {
    cut(ShardSplit::Columns, q);
  } else if (ends("gate_proj.weight") || ends("up_proj.weight")) {
    cut(ShardSplit::Rows, d.intermediate);
  } else if (ends("down_proj.weight")) {
    cut(ShardSplit::Columns, d.intermediate);
  } else if (!ends("norm.weight") && !ends("layernorm.weight")) {
    throw std::logic_error("shard plan: no rule for tensor '" + t.name + "'");
  }
  return s;
}

}  // namespace

const char* shard_split_name(ShardSplit split) {
  switch (split) {
    case ShardSplit::Replicated:
      return "replicated";
    case ShardSplit::Rows:
      return "rows";
    case ShardSplit::Columns:
      return "columns";
  }
  return "?";
}

ShardPlan ShardPlan::make(const ModelConfig& c, int ranks) {
  if (ranks < 1 || ranks > kMaxTensorParallel)
    refuse(ranks, "the degree must be in 1.." + std::to_string(kMaxTensorParallel));
  // Whole KV heads per rank, never a KV head copied onto several ranks (as vLLM does when
  // ranks outnumber KV heads): a copy would store and fill the same cache twice, and a rank's
  // KV pool holding only its own heads is what makes TP's memory scale. num_attention_heads is
  // a multiple of num_key_value_heads, so q heads then divide too, each rank's q heads being
  // exactly those that read its kv heads.
  if (c.n_kv_heads % ranks != 0)
    refuse(ranks, "num_key_value_heads " + std::to_string(c.n_kv_heads) + " is not a multiple of " +
                      std::to_string(ranks) +
                      " (each rank holds whole KV heads; KV heads are not replicated)");
  if (c.intermediate % ranks != 0)
    refuse(ranks, "intermediate_size " + std::to_string(c.intermediate) + " is not a multiple of " +
                      std::to_string(ranks));
  ShardPlan plan;
  plan.ranks_ = ranks;
  plan.vocab_per_rank_ = (c.vocab + ranks - 1) / ranks;
  if (int64_t(plan.vocab_per_rank_) * (ranks - 1) >= c.vocab)
    refuse(ranks, "vocab_size " + std::to_string(c.vocab) + " leaves the last rank no rows");
  const std::vector<ExpectedTensor> expected = expected_tensors(c);
  for (int r = 0; r < ranks; ++r) {
    RankDims d;
    d.q_heads = c.n_heads / ranks;
    d.kv_heads = c.n_kv_heads / ranks;
    d.intermediate = c.intermediate / ranks;
    d.vocab_begin = r * plan.vocab_per_rank_;
    d.vocab_end = std::min(c.vocab, (r + 1) * plan.vocab_per_rank_);
    plan.dims_.push_back(d);
    std::vector<TensorShard> shards;
    shards.reserve(expected.size());
    for (const ExpectedTensor& t : expected) shards.push_back(shard_of(t, c, r, d));
    plan.tensors_.push_back(std::move(shards));
  }
  return plan;
}

RankDims ShardPlan::dims(int rank) const {
  return dims_.at(size_t(rank));
}

uint64_t shard_bytes(const TensorShard& shard, size_t element_bytes) {
  uint64_t n = element_bytes;
  for (int64_t d : shard.shape) n *= uint64_t(d);
  return n;
}

void copy_shard(const TensorShard& s, size_t element_bytes, std::span<const std::byte> full,
                std::span<std::byte> out) {
  uint64_t full_bytes = element_bytes;
  for (int64_t d : s.full_shape) full_bytes *= uint64_t(d);
  if (full.size() != full_bytes || out.size() != shard_bytes(s, element_bytes))
    throw std::logic_error("copy_shard: wrong buffer sizes for '" + s.name + "'");
  // Bytes of one unit of the split dimension: a row's bytes for dim 0 (any rank of tensor),
  // one element for a matrix's columns.
  const uint64_t row_bytes = s.full_shape[0] == 0 ? 0 : full_bytes / uint64_t(s.full_shape[0]);
  if (s.slice.split != ShardSplit::Columns) {
    std::memcpy(out.data(), full.data() + uint64_t(s.slice.begin) * row_bytes, out.size());
    return;
  }
  const uint64_t piece = uint64_t(s.slice.end - s.slice.begin) * element_bytes;
  for (int64_t row = 0; row < s.full_shape[0]; ++row)
    std::memcpy(out.data() + uint64_t(row) * piece,
                full.data() + uint64_t(row) * row_bytes + uint64_t(s.slice.begin) * element_bytes,
                piece);
}

}  // namespace hearth
