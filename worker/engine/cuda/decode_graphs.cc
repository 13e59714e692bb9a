#include "worker/engine/cuda/decode_graphs.h"

#include <algorithm>

#include "kernels/batch_ops.h"
#include "kernels/cuda_check.h"

namespace hearth {

int sequence_bucket(int n, int cap) {
  if (n <= 8) return std::min(n, cap);
  int p = 16;
  while (p < n) p *= 2;
  const int step = p / 8;
  return std::min((n + step - 1) / step * step, cap);
}

int kv_bucket(int max_kv_len, int context) {
  int b = kernels::kAttentionSplitTokens;
  while (b < max_kv_len) b *= 2;
  return std::min(b, context);
}

void DecodeGraphs::run(int seqs, int kv_bound, cudaStream_t stream,
                       const std::function<void()>& launch) {
  const std::pair key{seqs, kv_bound};
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    if (eager_runs_[key]++ == 0) return launch();
    cudaGraph_t captured = nullptr;
    HEARTH_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      launch();
    } catch (...) {
      cudaStreamEndCapture(stream, &captured);
      if (captured) cudaGraphDestroy(captured);
      throw;
    }
    HEARTH_CUDA_CHECK(cudaStreamEndCapture(stream, &captured));
    const CudaGraph graph(captured);
    cudaGraphExec_t exec = nullptr;
    HEARTH_CUDA_CHECK(cudaGraphInstantiate(&exec, graph.get(), 0));
    it = graphs_.emplace(key, CudaGraphExec(exec)).first;
  }
  HEARTH_CUDA_CHECK(cudaGraphLaunch(it->second.get(), stream));
}

}  // namespace hearth
