#include "worker/engine/cuda/decode_step_plan.h"

#include <algorithm>
#include <vector>

#include "worker/engine/cuda/decode_graphs.h"

namespace hearth {

std::optional<DecodeStepPlan> plan_decode_step(const ForwardBatch& batch, bool cuda_graphs,
                                               int max_step_seqs, int context_length) {
  if (!cuda_graphs || int(batch.entries.size()) > max_step_seqs) return std::nullopt;
  int max_kv = 1;
  for (const ForwardEntry& e : batch.entries) {
    if (e.tokens.size() != 1 || !e.want_logits) return std::nullopt;
    max_kv = std::max(max_kv, e.start_pos + 1);
  }
  return DecodeStepPlan{sequence_bucket(int(batch.entries.size()), max_step_seqs),
                        kv_bucket(max_kv, context_length)};
}

void add_decode_rows(StepInputs& inputs, const ForwardBatch& batch, const DecodeStepPlan& plan,
                     std::span<int> entry_row) {
  const int n = int(batch.entries.size());
  inputs.begin(0);
  for (int i = 0; i < n; ++i) entry_row[size_t(i)] = inputs.add(batch.entries[size_t(i)], 0, 1);
  for (int i = n; i < plan.seqs; ++i) inputs.add_padding();
}

void capture_every_decode_bucket(int max_kv_len, int context_length, int block_size,
                                 int max_step_seqs,
                                 const std::function<void(const ForwardBatch&)>& forward,
                                 const std::function<bool(int, int)>& captured) {
  const int top = kv_bucket(std::clamp(max_kv_len, 1, context_length), context_length);
  for (int kv = kv_bucket(1, context_length);; kv = kv_bucket(kv + 1, context_length)) {
    const std::vector<int32_t> table(size_t((kv + block_size - 1) / block_size), 0);
    const int32_t token = 0;
    for (int n = 1, last = 0; n <= max_step_seqs; ++n) {
      const int bucket = sequence_bucket(n, max_step_seqs);
      if (bucket == last) continue;
      last = bucket;
      ForwardBatch batch;
      batch.entries.assign(size_t(bucket), ForwardEntry{std::span(&token, 1), kv - 1, table, true});
      while (!captured(bucket, kv)) forward(batch);  // eager once, then captured
    }
    if (kv >= top) break;
  }
}

}  // namespace hearth
