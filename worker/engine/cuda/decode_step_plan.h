// The plan of a decode step, one definition for the batched backend and each rank of the
// tensor-parallel backend: whether a batch can run from a decode graph, the bucket it pads to,
// and its rows in a step's inputs. Both backends pad and bucket the same way, so a TP rank's
// graph keys, padding rows and logits rows are the batched backend's.
#pragma once

#include <functional>
#include <optional>
#include <span>

#include "worker/engine/backend.h"
#include "worker/engine/cuda/step_inputs.h"

namespace hearth {

struct DecodeStepPlan {
  int seqs = 0;      // the sequence-count bucket (sequence_bucket): rows after the batch's pad
  int kv_bound = 0;  // the key-length bound (kv_bucket) the graph is captured for
};

// A decode step is every entry one token that wants its logits, at most `max_step_seqs` of
// them, with graphs on; anything else (prefill, a chunk, graphs off) runs eagerly: nullopt.
std::optional<DecodeStepPlan> plan_decode_step(const ForwardBatch& batch, bool cuda_graphs,
                                               int max_step_seqs, int context_length);

// Starts `inputs` at logits row 0 with the batch's rows, then the plan's padding rows. Each
// entry's logits row goes to `entry_row` (one per entry).
void add_decode_rows(StepInputs& inputs, const ForwardBatch& batch, const DecodeStepPlan& plan,
                     std::span<int> entry_row);

// Captures ahead of serving: runs `forward` on a decode batch of every sequence-count bucket up
// to `max_step_seqs` for every key-length bucket up to `max_kv_len` (each sequence on block 0 of
// the pool, so nothing may be using it yet) until `captured(seqs, kv_bound)` says its graph is.
void capture_every_decode_bucket(int max_kv_len, int context_length, int block_size,
                                 int max_step_seqs,
                                 const std::function<void(const ForwardBatch&)>& forward,
                                 const std::function<bool(int, int)>& captured);

}  // namespace hearth
