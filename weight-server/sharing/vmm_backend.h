// The seam between serving and CUDA: the `vmm` backend's server half (upload and export) and
// worker half (find the server's GPU, import, map, read back for checksums). Built without
// CUDA, or run without a GPU, these fail with a clear message; nothing here needs a driver
// just to start, so the memfd backend works everywhere.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "weight-server/sharing/exportable_store.h"
#include "weight-server/sharing/kv_chunk.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/model/shard_plan.h"
#include "weight-server/sharing/manifest.h"

namespace hearth {

// True when this build has CUDA and a device is present; otherwise false, with the reason in
// `why` when given ("built without CUDA", "no CUDA device (...)").
bool vmm_gpu_available(std::string* why = nullptr);

struct VmmLoadOptions {
  int device = 0;
  int threads = 4;        // host copy threads for the upload
  bool progress = false;  // progress lines on stderr
  // Sharded uploads: each device's pieces must fit in this share of its memory (the server's
  // --gpu-memory-fraction, per device); device_memory_bytes > 0 stands for every device's size.
  double memory_fraction = 1.0;
  uint64_t device_memory_bytes = 0;
};

// CUDA devices this process sees (0 without CUDA or a driver).
int vmm_device_count();

// Uploads every tensor into its own exportable VMM allocation (DeviceStore::upload, per-tensor
// layout). 2-D f32 tensors are stored as bf16, as the CUDA engine expects.
std::unique_ptr<ExportableStore> upload_vmm_store(const HfModel& model,
                                                  const VmmLoadOptions& options);

// Tensor parallelism (issue 26): rank r's pieces of `plan` uploaded to devices[r], each piece its
// own exportable VMM allocation (2 MiB granularity), rank 0's first; a piece of a 2-D f32 matrix
// is stored as bf16, as upload_vmm_store does. `checksums[i]` is the xxh3 of tensors()[i]'s bytes
// as uploaded, computed on the host before the copy. The store's sharded() names each rank's
// device and UUID. Throws std::runtime_error naming the device when a rank's pieces pass
// options.memory_fraction of its memory, or the upload fails (nothing stays allocated).
std::unique_ptr<ExportableStore> upload_sharded_vmm_store(const HfModel& model,
                                                          const ShardPlan& plan,
                                                          const std::vector<int>& devices,
                                                          const VmmLoadOptions& options,
                                                          std::vector<uint64_t>& checksums);

// The local device whose UUID is `gpu_uuid`. Throws std::runtime_error naming the server's GPU
// and this process's devices when none matches (another machine, or CUDA_VISIBLE_DEVICES
// hiding it).
int vmm_device_for(const std::string& gpu_uuid);

// Imports and maps `fds[i]` as the allocation of manifest.tensors[i] on `device` (from
// vmm_device_for). The descriptors are closed; the driver keeps the memory alive while mapped.
std::shared_ptr<const WeightStore> import_vmm_store(const Manifest& manifest,
                                                    std::vector<UniqueFd> fds, int device);

// The memory of `device` in bytes (what the server's budget divides).
uint64_t vmm_device_memory_bytes(int device);

// A KV chunk on the GPU: an exportable VMM allocation of `bytes` (a multiple of the
// granularity) on `device`.
std::unique_ptr<KvChunkMemory> create_vmm_kv_chunk(int device, uint64_t bytes);

// A worker's KV range on the GPU: `bytes` of reserved device address space (cuMemAddressReserve)
// into which received chunks are imported and mapped read-write for `device`.
std::unique_ptr<KvChunkRange> reserve_vmm_kv_range(int device, uint64_t bytes);

// xxh3 of `bytes` of device memory, copied back through a pinned buffer on the device that
// holds them (the pointer's own, so each rank's pieces are read on their GPU).
uint64_t device_checksum(const void* device_address, uint64_t bytes);

}  // namespace hearth
