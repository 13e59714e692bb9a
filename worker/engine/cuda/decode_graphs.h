// Decode steps (one token per sequence, each wanting logits) replayed from CUDA graphs, one per
// bucket of sequence count and key-length bound. A bucket's padding rows write no KV (slot -1)
// and, the kernels being row-invariant, never touch the real rows.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <utility>

#include "kernels/cuda_handles.h"

namespace hearth {

// Sequence-count buckets: every count up to 8, then steps of an eighth of the next power of two
// (at most 12.5% padding); never more than `cap`.
int sequence_bucket(int n, int cap);
// Key-length bound of a decode graph: a power of two number of attention splits, at most the
// context. The attention grid grows with it, so short sequences keep a small one.
int kv_bucket(int max_kv_len, int context);

class DecodeGraphs {
 public:
  // Runs the step `launch` enqueues on `stream` for bucket (seqs, kv_bound): eagerly the first
  // time (kernels set their attributes and make their plans outside of any capture), captured
  // the second, replayed from then on.
  void run(int seqs, int kv_bound, cudaStream_t stream, const std::function<void()>& launch);
  bool captured(int seqs, int kv_bound) const { return graphs_.contains({seqs, kv_bound}); }
  int size() const { return int(graphs_.size()); }

 private:
  std::map<std::pair<int, int>, CudaGraphExec> graphs_;
  std::map<std::pair<int, int>, int> eager_runs_;
};

}  // namespace hearth
