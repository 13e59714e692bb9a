#include "worker/engine/cuda/step_phases.h"

#include "kernels/cuda_check.h"

namespace hearth {

std::string_view step_phase_name(StepPhase phase) {
  static constexpr std::string_view names[] = {"inputs",  "norm",     "q",         "k+v",
                                               "q+k+v",   "kv_write", "attention", "o",
                                               "gate_up", "down",     "head"};
  static_assert(std::size(names) == StepPhases::kPhases);
  return names[int(phase)];
}

void StepPhases::record(cudaStream_t stream) {
  if (used_ == events_.size()) events_.push_back(make_event(cudaEventDefault));
  HEARTH_CUDA_CHECK(cudaEventRecord(events_[used_++].get(), stream));
}

void StepPhases::begin(cudaStream_t stream) {
  used_ = 0;
  phases_.clear();
  record(stream);
}

void StepPhases::mark(StepPhase phase, cudaStream_t stream) {
  if (used_ == 0) return;  // not begun
  phases_.push_back(phase);
  record(stream);
}

void StepPhases::finish(std::array<double, kPhases>& ms) {
  if (used_ == 0) return;
  HEARTH_CUDA_CHECK(cudaEventSynchronize(events_[used_ - 1].get()));
  for (size_t i = 0; i < phases_.size(); ++i) {
    float t = 0;
    HEARTH_CUDA_CHECK(cudaEventElapsedTime(&t, events_[i].get(), events_[i + 1].get()));
    ms[int(phases_[i])] += t;
  }
  used_ = 0;
  phases_.clear();
}

}  // namespace hearth
