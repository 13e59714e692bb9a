#include "worker/engine/cpu_backend.h"
#include "worker/engine/cpu_matmul.h"
#include "worker/engine/kv_fp8.h"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <stdexcept>
#include <string>

#include "weight-server/model/rank_store.h"
#include "weight-server/model/shard_plan.h"

namespace hearth {

namespace {

using cpu::dot;
using cpu::load_row;
using cpu::matmul;

// y = w * (x / rms(x)), computed in fp32 as transformers does.
void rmsnorm(float* y, const float* x, const WeightRef& w, int64_t n, double eps) {
  std::vector<float> weight(n);
  load_row(w, 0, weight.data());
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(ss / float(n) + float(eps));
  for (int64_t i = 0; i < n; ++i) y[i] = weight[i] * (x[i] * scale);
}

// Rotates pairs (i, i + d/2) of each head, the "rotate half" layout of HF checkpoints.
void rope(float* v, int n_heads, int head_dim, int pos, const std::vector<float>& inv_freq) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float angle = float(pos) * inv_freq[i];
    const float c = std::cos(angle), s = std::sin(angle);
    for (int h = 0; h < n_heads; ++h) {
      float* x = v + h * head_dim;
      const float a = x[i], b = x[i + half];
      x[i] = a * c - b * s;
      x[i + half] = b * c + a * s;
    }
  }
}

}  // namespace

CpuBackend::CpuBackend(std::shared_ptr<const WeightStore> store, int context_length, KvPoolShape kv,
                       std::shared_ptr<KvMemory> memory, int tensor_parallel,
                       std::vector<std::shared_ptr<const WeightStore>> rank_stores,
                       KvCacheDtype kv_dtype, std::shared_ptr<RankCollective> group)
    : store_(std::move(store)),
      c_(store_->config()),
      context_(context_length),
      kv_(kv),
      memory_(std::move(memory)),
      fp8_kv_(kv_dtype == KvCacheDtype::Fp8E4m3) {
  if (store_->residence() != Residence::Host)
    throw std::runtime_error(
        "the cpu backend needs host-resident weights, this store is on the GPU");
  if (context_ <= 0) throw std::runtime_error("context length must be positive");
  if (kv_.block_size <= 0)
    throw std::runtime_error("the KV block size must be positive, got " +
                             std::to_string(kv_.block_size));
  if (kv_.num_blocks == 0) kv_.num_blocks = (context_ + kv_.block_size - 1) / kv_.block_size;
  if (kv_.num_blocks < 0)
    throw std::runtime_error("negative KV pool size " + std::to_string(kv_.num_blocks));
  w_ = bind_weights(*store_);
  // With group_, rank_stores may be this process's rank's pieces alone.
  if (group && rank_stores.size() == 1) {
    std::vector<std::shared_ptr<const WeightStore>> all(static_cast<size_t>(tensor_parallel));
    all.at(size_t(std::clamp(group->rank(), 0, tensor_parallel - 1))) = rank_stores[0];
    rank_stores = std::move(all);
  }
  if (!rank_stores.empty() && int(rank_stores.size()) != tensor_parallel)
    throw std::runtime_error(
        "the model is sharded for tensor parallel " + std::to_string(rank_stores.size()) +
        ", the engine's tensor_parallel is " + std::to_string(tensor_parallel) +
        "; set tensor_parallel=" + std::to_string(rank_stores.size()));
  group_ = std::move(group);
  heads_ = c_.n_heads;
  kv_heads_ = c_.n_kv_heads;
  inter_ = c_.intermediate;
  if (group_) {
    if (group_->world_size() != tensor_parallel || tensor_parallel < 2)
      throw std::runtime_error("a process group of " + std::to_string(group_->world_size()) +
                               " ranks for tensor_parallel " + std::to_string(tensor_parallel));
    heads_ /= tensor_parallel;
    kv_heads_ /= tensor_parallel;
    inter_ /= tensor_parallel;
  }
  if (tensor_parallel > 1) {
    const ShardPlan plan = ShardPlan::make(c_, tensor_parallel);
    vocab_per_rank_ = plan.vocab_per_rank();
    for (int r = 0; r < tensor_parallel; ++r) {
      if (group_ && r != group_->rank()) continue;  // another process holds it
      std::shared_ptr<const WeightStore> pieces =
          rank_stores.empty() ? std::make_shared<const RankStore>(*store_, plan, r)
                              : rank_stores[size_t(r)];
      // A store of pieces from elsewhere must hold exactly this rank's shapes.
      for (const TensorShard& s : plan.tensors(r))
        if (pieces->at(s.name).info.shape != s.shape)
          throw std::runtime_error("rank " + std::to_string(r) + "'s tensor '" + s.name +
                                   "' is not the shape the shard plan gives it");
      ranks_.push_back({pieces, bind_weights(*pieces)});
    }
  }
  inv_freq_ = rope_inverse_frequencies(c_);
  // This process's KV heads (kv_heads_: every head, or with group_ its rank's) live in
  // kv_pools_ pools: its own, or one leased per rank (served tensor parallel in one process),
  // pool r holding heads [r * pool_heads_, (r + 1) * pool_heads_) in the layout one pool has
  // with that many heads.
  kv_pools_ = memory_ ? memory_->ranks() : 1;
  if (group_ && kv_pools_ > 1) {
    // The leader of rank processes, leased: every rank's pool as one (ranked_kv_memory.h), so the
    // engine grows and shrinks them together; this process addresses only its own, rank 0's,
    // which is the memory's base().
    if (kv_pools_ != tensor_parallel || group_->rank() != 0)
      throw std::runtime_error("a KV memory of " + std::to_string(kv_pools_) + " ranks for rank " +
                               std::to_string(group_->rank()) + " of " +
                               std::to_string(tensor_parallel) + " rank processes");
    kv_pools_ = 1;
  }
  if (kv_pools_ > 1 && (group_ || kv_pools_ != tensor_parallel || c_.n_kv_heads % kv_pools_ != 0))
    throw std::runtime_error(
        "a KV memory of " + std::to_string(kv_pools_) + " ranks for an engine of tensor_parallel " +
        std::to_string(tensor_parallel) + (group_ ? " in rank processes" : "") + " and " +
        std::to_string(c_.n_kv_heads) + " KV heads");
  pool_heads_ = kv_heads_ / kv_pools_;
  block_slots_ = size_t(c_.n_layers) * 2 * pool_heads_ * kv_.block_size;
  block_bytes_ = size_t(kv_bytes_per_token(c_, kv_dtype)) / size_t(c_.n_kv_heads / pool_heads_) *
                 kv_.block_size;
  if (memory_) {
    if (memory_->block_bytes() != int64_t(block_bytes_))
      throw std::runtime_error("the leased KV memory has blocks of " +
                               std::to_string(memory_->block_bytes()) + " bytes, the cpu " +
                               "backend needs " + std::to_string(block_bytes_));
    return;
  }
  // Not value-initialised: the pages of blocks never written are never touched.
  own_pool_ = std::make_unique_for_overwrite<std::byte[]>(block_bytes_ * kv_.num_blocks);
}

KvPoolShape CpuBackend::kv_pool() const {
  // Other workers' blocks sit in the same range past the pool's own: k_slot/v_slot address them
  // like own blocks, so the view only has to admit their ids.
  return memory_ ? leased_kv_pool(kv_.block_size, *memory_) : kv_;
}

std::byte* CpuBackend::pool() const {
  return memory_ ? memory_->base() : own_pool_.get();
}

int64_t CpuBackend::kv_bytes_per_token(const ModelConfig& config, KvCacheDtype kv_dtype) {
  // fp8: a byte per number and one fp32 scale per (layer, keys or values, KV head).
  const int64_t per_head = kv_dtype == KvCacheDtype::Fp8E4m3
                               ? config.head_dim + int64_t(sizeof(float))
                               : config.head_dim * int64_t(sizeof(float));
  return 2 * int64_t(config.n_layers) * config.n_kv_heads * per_head;
}

template <typename Get>
void CpuBackend::column_parallel(float* out, int64_t out_cols, const float* in, int n, Get get) {
  if (ranks_.empty() || group_) {  // the whole matrix, or this process's rank's rows
    const auto [W, b] = get(ranks_.empty() ? w_ : ranks_[0].w);
    matmul(out, in, n, W, b);
    return;
  }
  int64_t col = 0;
  for (const Rank& rank : ranks_) {
    const auto [W, b] = get(rank.w);
    part_out_.resize(size_t(n) * W.rows);
    matmul(part_out_.data(), in, n, W, b);
    for (int t = 0; t < n; ++t)
      std::copy_n(&part_out_[size_t(t) * W.rows], W.rows, out + t * out_cols + col);
    col += W.rows;
  }
}

template <typename Get>
void CpuBackend::row_parallel(float* out, const float* in, int64_t in_cols, int n, Get get) {
  if (ranks_.empty()) {
    matmul(out, in, n, get(w_));
    return;
  }
  if (group_) {  // `in` is this rank's columns already; the partials summed across processes
    const WeightRef W = get(ranks_[0].w);
    matmul(out, in, n, W);
    group_->all_reduce(out, size_t(n) * size_t(W.rows));
    return;
  }
  int64_t col = 0;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const WeightRef W = get(ranks_[r].w);
    part_in_.resize(size_t(n) * W.cols);
    for (int t = 0; t < n; ++t)
      std::copy_n(in + t * in_cols + col, W.cols, &part_in_[size_t(t) * W.cols]);
    col += W.cols;
    if (r == 0) {
      matmul(out, part_in_.data(), n, W);
      continue;
    }
    part_out_.resize(size_t(n) * W.rows);
    matmul(part_out_.data(), part_in_.data(), n, W);
    // The all-reduce: each rank's partial added to the sum so far, in rank order.
    for (int64_t i = 0; i < n * W.rows; ++i) out[i] += part_out_[i];
  }
}

void CpuBackend::embed_row(int32_t token, float* out) const {
  if (ranks_.empty()) return load_row(w_.embed, token, out);
  const int rank = token / vocab_per_rank_;  // the rank whose vocabulary rows hold it
  if (group_) {  // this process looks up its own rows only (embed(): the rest are gathered)
    if (rank == group_->rank()) load_row(ranks_[0].w.embed, token - rank * vocab_per_rank_, out);
    return;
  }
  load_row(ranks_[size_t(rank)].w.embed, token - rank * vocab_per_rank_, out);
}

size_t CpuBackend::slot(int layer, int value, int offset, int kv_head) const {
  return (size_t(layer) * 2 * pool_heads_ + size_t(value) * pool_heads_ + kv_head) *
             kv_.block_size +
         offset;
}

std::byte* CpuBackend::block_of(int32_t block, int& kv_head) const {
  if (kv_pools_ == 1) return pool() + size_t(block) * block_bytes_;
  const int rank = kv_head / pool_heads_;
  kv_head %= pool_heads_;
  return memory_->rank(rank).base() + size_t(block) * block_bytes_;
}

void CpuBackend::store_kv(int layer, int value, int32_t block, int offset, int kv_head,
                          const float* x) {
  std::byte* b = block_of(block, kv_head);
  const size_t s = slot(layer, value, offset, kv_head), hd = size_t(c_.head_dim);
  if (!fp8_kv_) {
    std::memcpy(b + s * hd * sizeof(float), x, hd * sizeof(float));
    return;
  }
  // Codes first, then the block's scales: a block stays one contiguous piece.
  const float scale = kv_fp8_quantize(x, int64_t(hd), reinterpret_cast<uint8_t*>(b + s * hd));
  std::memcpy(b + block_slots_ * hd + s * sizeof(float), &scale, sizeof(float));
}

const float* CpuBackend::load_kv(int layer, int value, int32_t block, int offset, int kv_head,
                                 float* scratch) const {
  const std::byte* b = block_of(block, kv_head);
  const size_t s = slot(layer, value, offset, kv_head), hd = size_t(c_.head_dim);
  if (!fp8_kv_) return reinterpret_cast<const float*>(b + s * hd * sizeof(float));
  float scale;
  std::memcpy(&scale, b + block_slots_ * hd + s * sizeof(float), sizeof(float));
  kv_fp8_dequantize(reinterpret_cast<const uint8_t*>(b + s * hd), scale, int64_t(hd), scratch);
  return scratch;
}

void CpuBackend::forward(const ForwardBatch& batch) {
  check_batch(batch);
  rows_.clear();
  tables_.clear();
  for (int e = 0; e < int(batch.entries.size()); ++e) {
    const ForwardEntry& entry = batch.entries[e];
    for (int t = 0; t < int(entry.tokens.size()); ++t) {
      rows_.push_back({e, entry.start_pos + t});
      tables_.push_back(entry.block_table.data());
    }
  }
  const int n = int(rows_.size());
  const int64_t h = c_.hidden;
  x_.resize(n * h);
  xn_.resize(n * h);
  q_.resize(n * int64_t(heads_) * c_.head_dim);
  k_.resize(n * int64_t(kv_heads_) * c_.head_dim);
  v_.resize(n * int64_t(kv_heads_) * c_.head_dim);
  att_.resize(n * int64_t(heads_) * c_.head_dim);
  gate_.resize(n * inter_);
  up_.resize(n * inter_);
  scores_.resize(context_);
  k_rows_.resize(context_);
  v_rows_.resize(context_);
  if (fp8_kv_) {
    k_read_.resize(size_t(context_) * c_.head_dim);
    v_read_.resize(size_t(context_) * c_.head_dim);
  }

  // The leader's plan goes to the followers before any rank needs them.
  if (group_) group_->begin_forward(batch);
  int r = 0;
  row_tokens_.clear();
  for (const ForwardEntry& entry : batch.entries)
    for (int32_t token : entry.tokens) {
      row_tokens_.push_back(token);
      embed_row(token, &x_[r++ * h]);
    }
  if (group_)  // each row from the rank holding its token: the row exactly, no sum
    group_->all_gather_rows(x_.data(), n, int(h), int(h),
                            [&](int rank, int first, int count, const float* data) {
                              for (int t = first; t < first + count; ++t)
                                if (row_tokens_[t] / vocab_per_rank_ == rank)
                                  std::copy_n(data + size_t(t - first) * h, h, &x_[t * h]);
                            });
  for (int l = 0; l < c_.n_layers; ++l) {
    const LayerWeights& L = w_.layers[l];
    attention(L, l);
    mlp(L, l, n);
  }

  // Logits of each wanting entry's last row, gathered so the LM head reads its weights once.
  logits_row_.assign(batch.entries.size(), -1);
  int m = 0, last = -1;
  for (int e = 0; e < int(batch.entries.size()); ++e) {
    last += int(batch.entries[e].tokens.size());
    if (!batch.entries[e].want_logits) continue;
    rmsnorm(&xn_[m * h], &x_[last * h], w_.final_norm, h, c_.rms_eps);
    logits_row_[e] = m++;
  }
  logits_.resize(size_t(m) * c_.vocab);
  if (group_) {  // this rank's vocabulary columns, gathered into the leader's rows
    const WeightRef& head = ranks_[0].w.lm_head;
    part_out_.resize(size_t(m) * head.rows);
    if (m > 0) matmul(part_out_.data(), xn_.data(), m, head, WeightRef{});
    const bool leader = group_->rank() == 0;
    group_->all_gather_rows(
        part_out_.data(), m, int(head.rows), vocab_per_rank_,
        [&](int rank, int first, int count, const float* data) {
          if (!leader) return;
          const int64_t cols = c_.vocab - int64_t(rank) * vocab_per_rank_;
          const int64_t w = std::min<int64_t>(cols, vocab_per_rank_);
          for (int t = first; t < first + count; ++t)
            std::copy_n(data + size_t(t - first) * w, w,
                        &logits_[size_t(t) * c_.vocab + size_t(rank) * vocab_per_rank_]);
        });
    return;
  }
  if (m > 0)
    column_parallel(logits_.data(), c_.vocab, xn_.data(), m,
                    [](const ModelWeights& w) { return std::pair(w.lm_head, WeightRef{}); });
}

std::span<const float> CpuBackend::logits(int entry) {
  if (entry < 0 || entry >= int(logits_row_.size()) || logits_row_[entry] < 0)
    throw std::runtime_error("batch entry " + std::to_string(entry) +
                             " has no logits: it did not ask for them in the last forward");
  return std::span<const float>(logits_).subspan(size_t(logits_row_[entry]) * c_.vocab, c_.vocab);
}

void CpuBackend::attention(const LayerWeights& L, int layer) {
  const int n = int(rows_.size());
  const int64_t h = c_.hidden, hd = c_.head_dim;
  const int64_t qd = heads_ * hd, kvd = kv_heads_ * hd;  // this process's heads
  const int bs = kv_.block_size;
  for (int t = 0; t < n; ++t) rmsnorm(&xn_[t * h], &x_[t * h], L.attn_norm, h, c_.rms_eps);
  auto of = [layer](auto member, auto bias) {
    return [=](const ModelWeights& w) {
      return std::pair(w.layers[layer].*member, w.layers[layer].*bias);
    };
  };
  column_parallel(q_.data(), qd, xn_.data(), n, of(&LayerWeights::wq, &LayerWeights::bq));
  column_parallel(k_.data(), kvd, xn_.data(), n, of(&LayerWeights::wk, &LayerWeights::bk));
  column_parallel(v_.data(), kvd, xn_.data(), n, of(&LayerWeights::wv, &LayerWeights::bv));

  // Every row's keys and values go into its sequence's blocks before any row attends, so a
  // row sees the rows before it in its own chunk.
  for (int t = 0; t < n; ++t) {
    float* q = &q_[t * qd];
    float* k = &k_[t * kvd];
    const int pos = rows_[t].pos;
    if (c_.qk_norm) {
      for (int hh = 0; hh < heads_; ++hh)
        rmsnorm(q + hh * hd, q + hh * hd, L.q_norm, hd, c_.rms_eps);
      for (int hh = 0; hh < kv_heads_; ++hh)
        rmsnorm(k + hh * hd, k + hh * hd, L.k_norm, hd, c_.rms_eps);
    }
    rope(q, heads_, int(hd), pos, inv_freq_);
    rope(k, kv_heads_, int(hd), pos, inv_freq_);
    const int32_t block = tables_[t][pos / bs];
    for (int g = 0; g < kv_heads_; ++g) {
      store_kv(layer, 0, block, pos % bs, g, k + g * hd);
      store_kv(layer, 1, block, pos % bs, g, &v_[t * kvd + g * hd]);
    }
  }

  const float scale = 1.0f / std::sqrt(float(hd));
  const int group = heads_ / kv_heads_;
  for (int t = 0; t < n; ++t) {
    const int last = rows_[t].pos;  // causal: attend to positions 0..last of this sequence
    const int32_t* table = tables_[t];
    for (int hh = 0; hh < heads_; ++hh) {
      const float* q = &q_[t * qd + hh * hd];
      const int g = hh / group;
      if (hh % group == 0)  // the group's keys and values, read (fp8: decoded) once
        for (int j = 0; j <= last; ++j) {
          k_rows_[j] =
              load_kv(layer, 0, table[j / bs], j % bs, g, fp8_kv_ ? &k_read_[j * hd] : nullptr);
          v_rows_[j] =
              load_kv(layer, 1, table[j / bs], j % bs, g, fp8_kv_ ? &v_read_[j * hd] : nullptr);
        }
      float max = -INFINITY;
      for (int j = 0; j <= last; ++j) {
        scores_[j] = dot(q, k_rows_[j], hd) * scale;
        max = std::max(max, scores_[j]);
      }
      float sum = 0.0f;
      for (int j = 0; j <= last; ++j) {
        scores_[j] = std::exp(scores_[j] - max);
        sum += scores_[j];
      }
      float* out = &att_[t * qd + hh * hd];
      std::fill_n(out, hd, 0.0f);
      for (int j = 0; j <= last; ++j) {
        const float p = scores_[j] / sum;
        const float* v = v_rows_[j];
        for (int64_t d = 0; d < hd; ++d) out[d] += p * v[d];
      }
    }
  }
  row_parallel(xn_.data(), att_.data(), qd, n,
               [layer](const ModelWeights& w) { return w.layers[layer].wo; });
  for (int64_t i = 0; i < n * h; ++i) x_[i] += xn_[i];
}

void CpuBackend::mlp(const LayerWeights& L, int layer, int n) {
  const int64_t h = c_.hidden, inter = inter_;
  for (int t = 0; t < n; ++t) rmsnorm(&xn_[t * h], &x_[t * h], L.mlp_norm, h, c_.rms_eps);
  auto of = [layer](auto member) {
    return [=](const ModelWeights& w) { return std::pair(w.layers[layer].*member, WeightRef{}); };
  };
  column_parallel(gate_.data(), inter, xn_.data(), n, of(&LayerWeights::w_gate));
  column_parallel(up_.data(), inter, xn_.data(), n, of(&LayerWeights::w_up));
  for (int64_t i = 0; i < n * inter; ++i) {
    const float g = gate_[i];
    gate_[i] = g / (1.0f + std::exp(-g)) * up_[i];  // SiLU(gate) * up
  }
  row_parallel(xn_.data(), gate_.data(), inter, n,
               [layer](const ModelWeights& w) { return w.layers[layer].w_down; });
  for (int64_t i = 0; i < n * h; ++i) x_[i] += xn_[i];
}

}  // namespace hearth
