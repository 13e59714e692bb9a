#include "worker/engine/cuda/step_inputs.h"

#include <algorithm>
#include <cstring>

#include "kernels/cuda_check.h"

namespace hearth {

namespace {

size_t align_up(size_t v, size_t to = 256) {
  return (v + to - 1) / to * to;
}

}  // namespace

std::vector<SubStep> split_substeps(const ForwardBatch& batch, int max_tokens, int max_seqs) {
  std::vector<SubStep> steps;
  size_t first = 0;
  int first_token = 0;
  while (first < batch.entries.size()) {
    int tokens = 0, seqs = 0;
    size_t e = first;
    int lo = first_token, hi = 0;
    while (e < batch.entries.size() && tokens < max_tokens && seqs < max_seqs) {
      const int n = int(batch.entries[e].tokens.size());
      lo = e == first ? first_token : 0;
      hi = std::min(n, lo + (max_tokens - tokens));
      tokens += hi - lo;
      ++seqs;
      ++e;
    }
    steps.push_back({first, e, first_token, hi});
    // The next one starts where this one stopped: inside the last entry, or after it.
    if (hi < int(batch.entries[e - 1].tokens.size())) {
      first = e - 1;
      first_token = hi;
    } else {
      first = e;
      first_token = 0;
    }
  }
  return steps;
}

StepInputs::StepInputs(const StepLimits& limits, int block_size, DeviceArena& arena)
    : block_size_(block_size), max_blocks_(limits.max_blocks) {
  const size_t T = limits.max_tokens, S = limits.max_step_seqs;
  Layout& m = layout_;
  m.tokens = 0;
  m.pos = align_up(m.tokens + T * 4);
  m.slot = align_up(m.pos + T * 4);
  m.query_start = align_up(m.slot + T * 4);
  m.first_pos = align_up(m.query_start + (S + 1) * 4);
  m.rows = align_up(m.first_pos + S * 4);
  m.block_table = align_up(m.rows + S * 4);
  m.bytes = m.block_table + S * size_t(max_blocks_) * 4;
  dev_ = arena.alloc(m.bytes);
  host_ = PinnedBuffer(m.bytes);
  copied_ = make_event();
}

void StepInputs::begin(int logits_row) {
  HEARTH_CUDA_CHECK(cudaEventSynchronize(copied_.get()));
  shape_ = StepShape{};
  shape_.logits_row = logits_row;
}

void StepInputs::set_table_row(int seq, const int32_t* blocks, size_t used) {
  int* row = host<int>(layout_.block_table) + size_t(seq) * max_blocks_;
  if (used) std::memcpy(row, blocks, used * 4);
  std::fill(row + used, row + max_blocks_, 0);
}

int StepInputs::add(const ForwardEntry& entry, int lo, int hi) {
  StepShape& s = shape_;
  const int seq = s.seqs++;
  host<int>(layout_.query_start)[seq] = s.tokens;
  host<int>(layout_.first_pos)[seq] = entry.start_pos + lo;
  s.max_kv_len = std::max(s.max_kv_len, entry.start_pos + hi);
  set_table_row(seq, entry.block_table.data(),
                std::min<size_t>(entry.block_table.size(), max_blocks_));
  int32_t* tokens = host<int32_t>(layout_.tokens);
  int* pos = host<int>(layout_.pos);
  int* slot = host<int>(layout_.slot);
  const int bs = block_size_;
  for (int i = lo; i < hi; ++i) {
    const int p = entry.start_pos + i;
    tokens[s.tokens] = entry.tokens[i];
    pos[s.tokens] = p;
    slot[s.tokens] = entry.block_table[p / bs] * bs + p % bs;
    ++s.tokens;
  }
  if (hi != int(entry.tokens.size()) || !entry.want_logits) return -1;
  host<int32_t>(layout_.rows)[s.rows++] = s.tokens - 1;
  return s.logits_row + s.rows - 1;
}

void StepInputs::add_padding() {
  StepShape& s = shape_;
  const int seq = s.seqs++;
  host<int>(layout_.query_start)[seq] = s.tokens;
  host<int>(layout_.first_pos)[seq] = 0;
  set_table_row(seq, nullptr, 0);
  host<int32_t>(layout_.tokens)[s.tokens] = 0;
  host<int>(layout_.pos)[s.tokens] = 0;
  host<int>(layout_.slot)[s.tokens] = -1;
  ++s.tokens;
  host<int32_t>(layout_.rows)[s.rows++] = s.tokens - 1;
  s.max_kv_len = std::max(s.max_kv_len, 1);
}

StepShape StepInputs::upload(cudaStream_t stream) {
  host<int>(layout_.query_start)[shape_.seqs] = shape_.tokens;
  const size_t bytes = layout_.block_table + size_t(shape_.seqs) * max_blocks_ * 4;
  HEARTH_CUDA_CHECK(
      cudaMemcpyAsync(dev_.get(), host_.get(), bytes, cudaMemcpyHostToDevice, stream));
  HEARTH_CUDA_CHECK(cudaEventRecord(copied_.get(), stream));
  return shape_;
}

}  // namespace hearth
