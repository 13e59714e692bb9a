#include "worker/engine/cuda/process_all_reduce.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/device_scope.h"

namespace hearth {

namespace {

// The flags follow the staging in one allocation, at an offset both sides compute alike.
size_t flags_offset(int64_t capacity) {
  return (kernels::all_reduce_staging_bytes(capacity) + 255) / 256 * 256;
}

size_t needed_bytes(int64_t capacity) {
  return flags_offset(capacity) + kernels::kAllReduceFlagsBytes;
}

std::string rank_name(int rank) {
  return "tensor-parallel rank " + std::to_string(rank);
}

}  // namespace

ProcessAllReduce::ProcessAllReduce(int rank, int ranks, int device, int64_t max_floats,
                                   int64_t two_shot_min_bytes)
    : rank_(rank), device_(device) {
  if (ranks < 1 || ranks > kernels::kMaxAllReduceRanks)
    throw std::runtime_error("the all-reduce takes 1.." +
                             std::to_string(kernels::kMaxAllReduceRanks) + " ranks, not " +
                             std::to_string(ranks));
  if (rank < 0 || rank >= ranks)
    throw std::runtime_error("all-reduce rank " + std::to_string(rank) + " of " +
                             std::to_string(ranks));
  if (max_floats < 1)
    throw std::runtime_error("the all-reduce needs a capacity of 1 float or more");
  int present = 0;
  HEARTH_CUDA_CHECK(cudaGetDeviceCount(&present));
  if (device < 0 || device >= present)
    throw std::runtime_error(rank_name(rank) + " was given GPU " + std::to_string(device) + "; " +
                             std::to_string(present) + " are present");
  group_.ranks = ranks;
  group_.capacity = kernels::all_reduce_capacity(max_floats);
  group_.two_shot_min_bytes = two_shot_min_bytes;
  own_blocks_ = kernels::all_reduce_blocks(device);
  group_.blocks = own_blocks_;

  kernels::DeviceScope scope(device);
  own_ = VmmAllocation::create(device, needed_bytes(group_.capacity));
  epochs_ = DeviceBuffer(kernels::kAllReduceEpochsBytes);
  // Peers write these flags as soon as they have mapped them: zero before any descriptor leaves.
  HEARTH_CUDA_CHECK(cudaMemset(own_.data(), 0, own_.size()));
  HEARTH_CUDA_CHECK(cudaMemset(epochs_.get(), 0, epochs_.bytes()));
  HEARTH_CUDA_CHECK(cudaDeviceSynchronize());
  peers_.resize(size_t(ranks));
  imported_.assign(size_t(ranks), false);
  imported_[size_t(rank)] = true;
  auto* base = static_cast<std::byte*>(own_.data());
  group_.staging[rank] = reinterpret_cast<float*>(base);
  group_.flags[rank] = reinterpret_cast<uint32_t*>(base + flags_offset(group_.capacity));
}

AllReduceShare ProcessAllReduce::share() const {
  return {rank_, group_.ranks, group_.capacity, own_blocks_, own_.size()};
}

UniqueFd ProcessAllReduce::export_fd() const {
  return UniqueFd(own_.export_fd());
}

void ProcessAllReduce::import_peer(const AllReduceShare& s, int fd) {
  const std::string who = rank_name(rank_) + " importing the all-reduce buffers of rank " +
                          std::to_string(s.rank) + ": ";
  if (s.ranks != group_.ranks)
    throw std::runtime_error(who + "it counts " + std::to_string(s.ranks) + " ranks, this " +
                             std::to_string(group_.ranks));
  if (s.rank < 0 || s.rank >= group_.ranks || s.rank == rank_)
    throw std::runtime_error(who + "not a peer's rank");
  if (imported_[size_t(s.rank)]) throw std::runtime_error(who + "imported already");
  if (s.capacity != group_.capacity)
    throw std::runtime_error(who + "capacity " + std::to_string(s.capacity) + " floats, this " +
                             std::to_string(group_.capacity));
  if (s.bytes < needed_bytes(s.capacity) || s.blocks < 1)
    throw std::runtime_error(who + "its allocation is too small for its capacity");
  kernels::DeviceScope scope(device_);
  VmmAllocation peer;
  try {
    peer = VmmAllocation::import(fd, s.bytes, device_);
  } catch (const std::exception& e) {
    throw std::runtime_error(who + e.what() + " (can GPU " + std::to_string(device_) +
                             " reach the peer's GPU?)");
  }
  auto* base = static_cast<std::byte*>(peer.data());
  group_.staging[s.rank] = reinterpret_cast<float*>(base);
  group_.flags[s.rank] = reinterpret_cast<uint32_t*>(base + flags_offset(s.capacity));
  group_.blocks = std::min(group_.blocks, int(s.blocks));
  peers_[size_t(s.rank)] = std::move(peer);
  imported_[size_t(s.rank)] = true;
}

bool ProcessAllReduce::ready() const {
  return std::all_of(imported_.begin(), imported_.end(), [](bool b) { return b; });
}

bool ProcessAllReduce::run(const float* partial, float* out, int64_t count, bool accumulate,
                           cudaStream_t stream, const kernels::AllReduceNorm* norm) {
  if (!ready())
    throw std::runtime_error(rank_name(rank_) +
                             ": the all-reduce ran before every peer's buffers were imported");
  kernels::DeviceScope scope(device_);
  return group_.run(rank_, epochs_.get<uint32_t>(), partial, out, count, accumulate, stream, norm);
}

}  // namespace hearth
