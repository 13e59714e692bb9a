// Where a step's device time goes, by kind of kernel: events recorded on the stream between the
// kernels of an eager (not graph-replayed) forward, their gaps summed per phase over the layers.
// For benchmarks (hearth-bench --serve-bench); the engine never turns it on. A phase's time runs
// from the end of the kernel before it to the end of its own, so a phase whose kernels are
// shorter than their launch also carries the launch's wait (a graph replay has none).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <string_view>
#include <vector>

#include "kernels/cuda_handles.h"

namespace hearth {

enum class StepPhase {
  Inputs,   // the step's input upload, embedding and attention plan
  Norm,     // both rmsnorms of every layer
  Q,        // q projection
  KV,       // k and v projections
  QKV,      // q, k and v in one launch (the wgmma kernel; then Q and KV stay empty)
  KvWrite,  // bias, head norm, RoPE, keys and values into the pool
  Attention,
  O,       // o projection into the residual
  GateUp,  // gate/up with SwiGLU
  Down,    // down projection into the residual
  Head,    // gather, final norm, lm_head
  kCount
};

std::string_view step_phase_name(StepPhase phase);

class StepPhases {
 public:
  static constexpr int kPhases = int(StepPhase::kCount);

  // Starts timing on `stream`.
  void begin(cudaStream_t stream);
  // The work enqueued since the last mark (or begin) belongs to `phase`.
  void mark(StepPhase phase, cudaStream_t stream);
  // Waits for the stream and adds each phase's milliseconds to `ms`.
  void finish(std::array<double, kPhases>& ms);

 private:
  std::vector<CudaEvent> events_;
  std::vector<StepPhase> phases_;  // phases_[i]: the span from events_[i] to events_[i + 1]
  size_t used_ = 0;
  void record(cudaStream_t stream);
};

}  // namespace hearth
