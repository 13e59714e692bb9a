#include "kernels/peer_all_reduce.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/all_reduce.h"
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
    : devices_(std::move(devices)),
      max_floats_(max_floats),
      two_shot_min_bytes_(two_shot_min_bytes) {
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
  if (max_floats_ < 1)
    throw std::runtime_error("the all-reduce needs a capacity of 1 float or more");
  // One block per SM of the smallest device, so every block of every rank is resident at once
  // (they wait on each other) and all ranks run the same grid.
  blocks_ = kMaxAllReduceBlocks;
  for (int d : devices_) {
    int sms = 0;
    HEARTH_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d));
    blocks_ = std::min(blocks_, sms);
  }
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (i != j) grants_.emplace_back(devices_[size_t(i)], devices_[size_t(j)]);
  // Capacity rounded to a multiple of 4 floats keeps each half 16-byte aligned.
  max_floats_ = (max_floats_ + 3) / 4 * 4;
  for (int d : devices_) {
    DeviceScope scope(d);
    Rank r{DeviceBuffer(size_t(2 * max_floats_) * sizeof(float)),
           DeviceBuffer(size_t(kMaxAllReduceBlocks) * kMaxAllReduceRanks * sizeof(uint32_t)),
           DeviceBuffer(size_t(kMaxAllReduceBlocks) * sizeof(uint32_t))};
    HEARTH_CUDA_CHECK(cudaMemset(r.flags.get(), 0, r.flags.bytes()));
    HEARTH_CUDA_CHECK(cudaMemset(r.epochs.get(), 0, r.epochs.bytes()));
    HEARTH_CUDA_CHECK(cudaDeviceSynchronize());
    ranks_.push_back(std::move(r));
  }
}

void PeerAllReduce::run(int rank, const float* partial, float* out, int64_t count, bool accumulate,
                        cudaStream_t stream) {
  if (rank < 0 || rank >= ranks())
    throw std::runtime_error("all-reduce rank " + std::to_string(rank) + " of " +
                             std::to_string(ranks()));
  if (count < 0 || count > max_floats_)
    throw std::runtime_error("all-reduce of " + std::to_string(count) + " floats; capacity " +
                             std::to_string(max_floats_));
  AllReduceArgs a{};
  for (int p = 0; p < ranks(); ++p) {
    a.staging[p] = ranks_[size_t(p)].staging.get<float>();
    a.flags[p] = ranks_[size_t(p)].flags.get<uint32_t>();
  }
  a.epochs = ranks_[size_t(rank)].epochs.get<uint32_t>();
  a.capacity = max_floats_;
  a.rank = rank;
  a.n_ranks = ranks();
  a.blocks = blocks_;
  a.partial = partial;
  a.out = out;
  a.count = count;
  a.accumulate = accumulate;
  a.two_shot = two_shot(count);
  DeviceScope scope(devices_[size_t(rank)]);
  launch_fixed_order_all_reduce(a, stream);
}

}  // namespace hearth::kernels
