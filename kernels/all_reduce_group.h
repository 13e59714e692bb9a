// The buffers of one fixed-order all-reduce group as this process addresses them, and the one
// launch path over them. Every rank's staging and flags are here, whatever allocated them:
// PeerAllReduce (cudaMalloc and peer access, all ranks in one process) or a rank's process
// that imported its peers' exported VMM allocations (worker/engine/cuda/process_all_reduce.h).
// Both call run(), so the kernel, the grid and the one/two-shot choice are the same code.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/all_reduce.h"

namespace hearth::kernels {

// Staging capacity (floats per half) for a largest count of `max_floats`: a multiple of 4 keeps
// each half 16-byte aligned.
inline int64_t all_reduce_capacity(int64_t max_floats) {
  return (max_floats + 3) / 4 * 4;
}
// Bytes of one rank's staging (two halves) and of its flag array.
inline size_t all_reduce_staging_bytes(int64_t capacity) {
  return size_t(2 * capacity) * sizeof(float);
}
inline constexpr size_t kAllReduceFlagsBytes =
    size_t(kMaxAllReduceBlocks) * kMaxAllReduceRanks * sizeof(uint32_t);
// Bytes of one rank's epoch counters (its own device, never shared).
inline constexpr size_t kAllReduceEpochsBytes = size_t(kMaxAllReduceBlocks) * sizeof(uint32_t);

// The grid a device can hold at once: one block per SM, capped. A group runs the smallest of
// its ranks' grids, so every block of every rank is resident together (they wait on each other).
int all_reduce_blocks(int device);

struct AllReduceGroup {
  // Counts of this many bytes and more run in two shots over three or more ranks (all_reduce.h;
  // the same bits either way; measured on 4 x H100: weight-server/TENSOR_PARALLEL.md).
  static constexpr int64_t kDefaultTwoShotMinBytes = int64_t(1) << 20;

  float* staging[kMaxAllReduceRanks] = {};
  uint32_t* flags[kMaxAllReduceRanks] = {};
  int ranks = 0;
  int64_t capacity = 0;  // floats per staging half
  int blocks = 0;        // the same on every rank
  int64_t two_shot_min_bytes = 0;
  // With a norm, one-shot calls norm in the all-reduce's launch; false (or two shots) leaves the
  // norm to the caller (kernels::rmsnorm: the same bits), kept for tests and as the fallback.
  bool fuse_norm = true;

  // Whether `count` floats take two shots (every rank decides alike).
  bool two_shot(int64_t count) const {
    return ranks > 2 && count * int64_t(sizeof(float)) >= two_shot_min_bytes;
  }
  // out = (accumulate ? out : 0) + rank-order sum of the partials, as rank `rank`; `epochs` is
  // that rank's counters (kAllReduceEpochsBytes, zeroed before the first call), `stream` one of
  // its device's (the caller makes that device current). With `norm`, where one shot and
  // fuse_norm, the same launch also writes rmsnorm of out's count / norm->hidden rows into
  // norm->out; returns whether it did. When not, it launches nothing more: the caller norms, and
  // only after every rank's all-reduce is enqueued (loading a kernel lazily may wait for the
  // device's running kernels, and this all-reduce waits for its peers: a norm launched between
  // two ranks' launches from one thread can deadlock). Throws on a bad rank, count or norm.
  bool run(int rank, uint32_t* epochs, const float* partial, float* out, int64_t count,
           bool accumulate, cudaStream_t stream, const AllReduceNorm* norm = nullptr) const;
};

}  // namespace hearth::kernels
