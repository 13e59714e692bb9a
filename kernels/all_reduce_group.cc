#include "kernels/all_reduce_group.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"

namespace hearth::kernels {

int all_reduce_blocks(int device) {
  int sms = 0;
  HEARTH_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return std::min(kMaxAllReduceBlocks, sms);
}

bool AllReduceGroup::run(int rank, uint32_t* epochs, const float* partial, float* out,
                         int64_t count, bool accumulate, cudaStream_t stream,
                         const AllReduceNorm* norm) const {
  if (rank < 0 || rank >= ranks)
    throw std::runtime_error("all-reduce rank " + std::to_string(rank) + " of " +
                             std::to_string(ranks));
  if (count < 0 || count > capacity)
    throw std::runtime_error("all-reduce of " + std::to_string(count) + " floats; capacity " +
                             std::to_string(capacity));
  if (norm && (norm->hidden < 1 || count % norm->hidden != 0 || !norm->weight || !norm->out))
    throw std::runtime_error("all-reduce norm of " + std::to_string(count) + " floats by rows of " +
                             std::to_string(norm ? norm->hidden : 0) +
                             ": not whole rows, or no weight or output");
  AllReduceArgs a{};
  for (int p = 0; p < ranks; ++p) {
    a.staging[p] = staging[p];
    a.flags[p] = flags[p];
  }
  a.epochs = epochs;
  a.capacity = capacity;
  a.rank = rank;
  a.n_ranks = ranks;
  a.blocks = blocks;
  a.partial = partial;
  a.out = out;
  a.count = count;
  a.accumulate = accumulate;
  a.two_shot = two_shot(count);
  const bool fused = norm && fuse_norm && !a.two_shot;
  if (fused) a.norm = *norm;
  launch_fixed_order_all_reduce(a, stream);
  return fused;
}

}  // namespace hearth::kernels
