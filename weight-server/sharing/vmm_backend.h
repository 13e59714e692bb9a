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
#include "weight-server/sharing/manifest.h"

namespace hearth {

// True when this build has CUDA and a device is present; otherwise false, with the reason in
// `why` when given ("built without CUDA", "no CUDA device (...)").
bool vmm_gpu_available(std::string* why = nullptr);

struct VmmLoadOptions {
  int device = 0;
  int threads = 4;        // host copy threads for the upload
  bool progress = false;  // progress lines on stderr
};

// Uploads every tensor into its own exportable VMM allocation (DeviceStore::upload, per-tensor
// layout). 2-D f32 tensors are stored as bf16, as the CUDA engine expects.
std::unique_ptr<ExportableStore> upload_vmm_store(const HfModel& model,
                                                  const VmmLoadOptions& options);

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

// xxh3 of `bytes` of device memory, copied back through a pinned buffer.
uint64_t device_checksum(const void* device_address, uint64_t bytes);

}  // namespace hearth
