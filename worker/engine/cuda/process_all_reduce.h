// One rank's side of the fixed-order all-reduce when each rank is its own process on its own GPU
// (issue 26, tensor_parallel_processes). The rank allocates its staging and flags as one CUDA
// VMM allocation on its device, exportable as a POSIX file descriptor; every other rank imports
// that descriptor, maps it and grants its own device access. Then each process runs the same
// kernel as the in-process group (kernels/all_reduce_group.h) over its peers' mappings: the same
// rank-order sum, the same bits. Moving the descriptors (SCM_RIGHTS) is the caller's job.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "kernels/all_reduce_group.h"
#include "kernels/device_buffer.h"
#include "weight-server/model/vmm_allocation.h"

namespace hearth {

// What rank `rank` tells its peers about its allocation; its descriptor travels beside it.
struct AllReduceShare {
  int32_t rank = 0;
  int32_t ranks = 0;
  int64_t capacity = 0;  // floats per staging half: the same on every rank
  int32_t blocks = 0;    // the grid its device holds at once; the group runs the smallest
  uint64_t bytes = 0;    // the exported allocation's size
};

class ProcessAllReduce {
 public:
  // Rank `rank` of `ranks`, on CUDA device `device`; max_floats the largest count run() takes.
  ProcessAllReduce(int rank, int ranks, int device, int64_t max_floats,
                   int64_t two_shot_min_bytes = kernels::AllReduceGroup::kDefaultTwoShotMinBytes);
  ProcessAllReduce(const ProcessAllReduce&) = delete;
  ProcessAllReduce& operator=(const ProcessAllReduce&) = delete;

  int rank() const { return rank_; }
  int ranks() const { return group_.ranks; }
  int device() const { return device_; }
  int64_t max_floats() const { return group_.capacity; }
  bool two_shot(int64_t count) const { return group_.two_shot(count); }

  AllReduceShare share() const;
  // A new descriptor for this rank's allocation, to send to one peer.
  UniqueFd export_fd() const;
  // Maps a peer's allocation from its share and descriptor (the caller keeps and closes `fd`).
  // Throws naming the peer when the share does not fit this group or the mapping fails.
  void import_peer(const AllReduceShare& share, int fd);
  // Whether every peer has been imported: run() needs them all.
  bool ready() const;

  // out = (accumulate ? out : 0) + rank-order sum of every rank's partial; partial and out are
  // `count` floats on this rank's device, stream one of its streams. Every rank must call it
  // with the same counts in the same order; it may be captured in a CUDA graph. With `norm`,
  // returns whether the launch also wrote rmsnorm of out's rows into norm->out (if not, the
  // caller norms: kernels::AllReduceGroup::run).
  bool run(const float* partial, float* out, int64_t count, bool accumulate, cudaStream_t stream,
           const kernels::AllReduceNorm* norm = nullptr);
  // Whether a norm rides in the all-reduce's launch (default) or is left to the caller.
  void set_fuse_norm(bool fuse) { group_.fuse_norm = fuse; }

 private:
  int rank_ = 0, device_ = 0;
  int own_blocks_ = 0;
  VmmAllocation own_;
  std::vector<VmmAllocation> peers_;  // by rank; this rank's slot stays empty
  std::vector<bool> imported_;
  DeviceBuffer epochs_;
  kernels::AllReduceGroup group_;
};

}  // namespace hearth
