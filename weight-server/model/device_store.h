// Weights resident on the GPU. The default layout gives every tensor its own VMM allocation
// (2 MiB aligned, exportable to other processes as a file descriptor); `packed` puts them all
// in one cudaMalloc arena, so the two can be compared. Uploads stream through pinned staging
// buffers with several copies in flight. 2-D f32 tensors are rounded to bf16 on the way: the
// CUDA engine multiplies 16-bit matrices.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "weight-server/model/hf_model.h"
#include "weight-server/model/vmm_allocation.h"
#include "weight-server/model/weight_store.h"

namespace hearth {

enum class DeviceLayout { PerTensor, Packed };

struct UploadOptions {
  int device = 0;
  DeviceLayout layout = DeviceLayout::PerTensor;
  bool progress = false;  // progress lines on stderr
  int threads = 4;        // host copy threads, each with two staging buffers
};

struct UploadStats {
  uint64_t bytes = 0;
  double seconds = 0;
};

class DeviceStore final : public WeightStore {
 public:
  static std::unique_ptr<DeviceStore> upload(const HfModel& model, const UploadOptions& options);
  // Adopts allocations imported from another process; tensors[i] lives at the start of
  // allocations[tensors[i].alloc_id].
  static std::unique_ptr<DeviceStore> adopt(const ModelConfig& config,
                                            std::vector<StoredTensor> tensors,
                                            std::vector<VmmAllocation> allocations,
                                            std::string gpu_uuid);
  ~DeviceStore() override;

  Residence residence() const override { return Residence::Device; }
  const char* backend_name() const override {
    return layout_ == DeviceLayout::Packed ? "packed" : "vmm";
  }

  DeviceLayout layout() const { return layout_; }
  const std::vector<VmmAllocation>& allocations() const { return allocations_; }
  const std::string& gpu_uuid() const { return gpu_uuid_; }
  const UploadStats& upload_stats() const { return stats_; }
  uint64_t device_bytes() const;  // what the allocations occupy

 private:
  DeviceStore() = default;
  DeviceLayout layout_ = DeviceLayout::PerTensor;
  std::vector<VmmAllocation> allocations_;
  void* arena_ = nullptr;  // packed layout
  uint64_t arena_bytes_ = 0;
  std::string gpu_uuid_;
  UploadStats stats_;
};

}  // namespace hearth
