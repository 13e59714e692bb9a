#include "kernels/peer_all_reduce.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/cuda_check.h"
#include "kernels/device_scope.h"

namespace hearth::kernels {

PeerAccessGrant::PeerAccessGrant(int device, int peer) : device_(device), peer_(peer) {
  int can = 0;
  HEARTH_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, peer));
  if (!can)
    throw std::runtime_error("GPU " + std::to_string(device) + " cannot access GPU " +
                             std::to_string(peer) +
                             "'s memory (no peer access): the all-reduce needs every pair");
  DeviceScope scope(device);
  const cudaError_t err = cudaDeviceEnablePeerAccess(peer, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();  // someone else's grant: leave it as it was on destruction
  } else {
    HEARTH_CUDA_CHECK(err);
    enabled_here_ = true;
  }
}

PeerAccessGrant::PeerAccessGrant(PeerAccessGrant&& o) noexcept
    : device_(o.device_), peer_(o.peer_), enabled_here_(std::exchange(o.enabled_here_, false)) {}

PeerAccessGrant::~PeerAccessGrant() {
  if (!enabled_here_) return;
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) return;
  if (cudaSetDevice(device_) == cudaSuccess) cudaDeviceDisablePeerAccess(peer_);
  cudaSetDevice(previous);
}

PeerAllReduce::PeerAllReduce(std::vector<int> devices, int64_t max_floats,
                             int64_t two_shot_min_bytes)
    : devices_(std::move(devices)) {
  const int n = int(devices_.size());
  if (n < 1 || n > kMaxAllReduceRanks)
    throw std::runtime_error("the all-reduce takes 1.." + std::to_string(kMaxAllReduceRanks) +
                             " GPUs, not " + std::to_string(n));
  int present = 0;
  HEARTH_CUDA_CHECK(cudaGetDeviceCount(&present));
  for (int d : devices_)
    if (d < 0 || d >= present)
      throw std::runtime_error("the all-reduce was given GPU " + std::to_string(d) + "; " +
                               std::to_string(present) + " are present");
  if (max_floats < 1)
    throw std::runtime_error("the all-reduce needs a capacity of 1 float or more");
  group_.ranks = n;
  group_.capacity = all_reduce_capacity(max_floats);
  group_.two_shot_min_bytes = two_shot_min_bytes;
  group_.blocks = kMaxAllReduceBlocks;
  for (int d : devices_) group_.blocks = std::min(group_.blocks, all_reduce_blocks(d));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (i != j) grants_.emplace_back(devices_[size_t(i)], devices_[size_t(j)]);
  for (int d : devices_) {
    DeviceScope scope(d);
    Rank r{DeviceBuffer(all_reduce_staging_bytes(group_.capacity)),
           DeviceBuffer(kAllReduceFlagsBytes), DeviceBuffer(kAllReduceEpochsBytes)};
    HEARTH_CUDA_CHECK(cudaMemset(r.flags.get(), 0, r.flags.bytes()));
    HEARTH_CUDA_CHECK(cudaMemset(r.epochs.get(), 0, r.epochs.bytes()));
    HEARTH_CUDA_CHECK(cudaDeviceSynchronize());
    group_.staging[ranks_.size()] = r.staging.get<float>();
    group_.flags[ranks_.size()] = r.flags.get<uint32_t>();
    ranks_.push_back(std::move(r));
  }
}

bool PeerAllReduce::run(int rank, const float* partial, float* out, int64_t count, bool accumulate,
                        cudaStream_t stream, const AllReduceNorm* norm) {
  if (rank < 0 || rank >= ranks())
    throw std::runtime_error("all-reduce rank " + std::to_string(rank) + " of " +
                             std::to_string(ranks()));
  DeviceScope scope(devices_[size_t(rank)]);
  return group_.run(rank, ranks_[size_t(rank)].epochs.get<uint32_t>(), partial, out, count,
                    accumulate, stream, norm);
}

}  // namespace hearth::kernels
