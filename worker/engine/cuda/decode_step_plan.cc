#include "worker/engine/cuda/decode_step_plan.h"

#include <algorithm>

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

}  // namespace hearth
