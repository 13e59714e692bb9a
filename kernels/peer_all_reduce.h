// PeerAllReduce: the fixed-order all-reduce (kernels/all_reduce.h) over the GPUs of one process.
// Owns, per rank, a staging buffer and flag array every peer reads or writes through peer access
// (enabled here, and disabled again on destruction where this object enabled it). One object
// serves one sequence of all-reduces: every rank must call run() with the same counts in the
// same order (each rank on its own stream); the epochs live in device memory, so the calls can be
// captured in CUDA graphs and replayed any number of times. The launch itself is
// AllReduceGroup::run (kernels/all_reduce_group.h), shared with the ranks-as-processes group.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/all_reduce_group.h"
#include "kernels/device_buffer.h"

namespace hearth::kernels {

// Peer access from one device to another, revoked on destruction if this grant enabled it.
class PeerAccessGrant {
 public:
  PeerAccessGrant(int device, int peer);
  PeerAccessGrant(PeerAccessGrant&& o) noexcept;
  PeerAccessGrant& operator=(PeerAccessGrant&&) = delete;
  PeerAccessGrant(const PeerAccessGrant&) = delete;
  PeerAccessGrant& operator=(const PeerAccessGrant&) = delete;
  ~PeerAccessGrant();

 private:
  int device_ = -1, peer_ = -1;
  bool enabled_here_ = false;
};

class PeerAllReduce {
 public:
  // devices[r] is rank r's CUDA device; max_floats the largest count run() will be given.
  // Throws naming the pair when two devices cannot reach each other.
  PeerAllReduce(std::vector<int> devices, int64_t max_floats,
                int64_t two_shot_min_bytes = AllReduceGroup::kDefaultTwoShotMinBytes);

  int ranks() const { return int(devices_.size()); }
  int device(int rank) const { return devices_[size_t(rank)]; }
  int64_t max_floats() const { return group_.capacity; }
  // Whether run() with `count` floats takes two shots (every rank decides alike).
  bool two_shot(int64_t count) const { return group_.two_shot(count); }

  // out = (accumulate ? out : 0) + ((partial_0 + partial_1) + ... + partial_{N-1}) on `rank`,
  // fp32; partial and out are `count` floats on rank's device, stream is one of that device's.
  // With `norm`, returns whether the launch also wrote rmsnorm of out's rows into norm->out; if
  // not, norm after every rank's run (AllReduceGroup::run says why).
  bool run(int rank, const float* partial, float* out, int64_t count, bool accumulate,
           cudaStream_t stream, const AllReduceNorm* norm = nullptr);
  // Whether a norm rides in the all-reduce's launch (default) or is left to the caller.
  void set_fuse_norm(bool fuse) { group_.fuse_norm = fuse; }

 private:
  struct Rank {
    DeviceBuffer staging, flags, epochs;
  };
  std::vector<int> devices_;
  AllReduceGroup group_;  // points into ranks_
  std::vector<PeerAccessGrant> grants_;
  std::vector<Rank> ranks_;
};

}  // namespace hearth::kernels
