// The `vmm` backend sharded for tensor parallelism (issue 26): rank r's pieces on rank r's GPU,
// each its own exportable VMM allocation, exported once (as ExportedDeviceStore does) so that an
// import request costs a dup. Declared in vmm_backend.h.
#include <cuda_runtime.h>
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "kernels/cuda_check.h"
#include "weight-server/model/dtype.h"
#include "weight-server/model/parallel_for.h"
#include "weight-server/model/vmm_allocation.h"
#include "weight-server/sharing/checksum.h"
#include "weight-server/sharing/vmm_backend.h"

namespace hearth {

namespace {

// VMM's allocation granularity on the GPUs hearth runs on; the budget check rounds with it
// before anything is allocated (VmmAllocation::create rounds with the device's own).
constexpr uint64_t kGranularity = 2ull << 20;

// As DeviceStore::upload stores a tensor: a 2-D f32 matrix as bf16 (an fp8 weight's [out, 1]
// scale is no matrix and stays f32). Decided on the whole tensor, so every rank agrees.
DType stored_dtype(const TensorInfo& whole) {
  return whole.dtype == DType::F32 && whole.shape.size() == 2 && !whole.name.ends_with("_scale")
             ? DType::BF16
             : whole.dtype;
}

class ShardedVmmStore final : public ExportableStore {
 public:
  explicit ShardedVmmStore(ShardedLayout layout) : layout_(std::move(layout)) {}

  Residence residence() const override { return Residence::Device; }
  const char* backend_name() const override { return "vmm"; }
  size_t allocation_count() const override { return allocations_.size(); }
  std::string gpu_uuid() const override { return layout_.gpu_uuids.at(0); }
  const ShardedLayout* sharded() const override { return &layout_; }
  UniqueFd export_allocation(uint32_t id) const override {
    if (id >= exported_.size())
      throw std::out_of_range("allocation " + std::to_string(id) +
                              " does not exist (the model has " + std::to_string(exported_.size()) +
                              ")");
    const int fd = ::fcntl(exported_[id].get(), F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
      throw std::system_error(errno, std::generic_category(),
                              "duplicating the descriptor of allocation " + std::to_string(id));
    return UniqueFd(fd);
  }

  // Filled by upload_sharded_vmm_store.
  ShardedLayout layout_;
  std::vector<VmmAllocation> allocations_;  // tensors()[i] at the start of allocations_[i]
  std::vector<UniqueFd> exported_;

  using ExportableStore::add_tensor;
  void set(ModelConfig config, LoadTimings timings) {
    config_ = std::move(config);
    timings_ = timings;
  }
};

}  // namespace

std::unique_ptr<ExportableStore> upload_sharded_vmm_store(const HfModel& model,
                                                          const ShardPlan& plan,
                                                          const std::vector<int>& devices,
                                                          const VmmLoadOptions& options,
                                                          std::vector<uint64_t>& checksums) {
  std::string why;
  if (!vmm_gpu_available(&why))
    throw std::runtime_error("the vmm backend needs a CUDA GPU: " + why);
  if (devices.size() != size_t(plan.ranks())) throw std::logic_error("a device per rank is needed");
  const auto start = std::chrono::steady_clock::now();
  ShardedLayout layout;
  layout.plan = plan;
  layout.devices = devices;
  for (const int d : devices) layout.gpu_uuids.push_back(cuda_device_uuid(d));

  struct Piece {
    int rank;
    const TensorShard* shard;
    const HfTensor* source;
    DType dtype;  // as stored
    uint64_t bytes;
  };
  std::vector<Piece> pieces;
  std::vector<uint64_t> per_rank(size_t(plan.ranks()), 0);
  for (int r = 0; r < plan.ranks(); ++r)
    for (const TensorShard& s : plan.tensors(r)) {
      const HfTensor* source = model.find(s.name);
      if (!source) throw std::logic_error("shard of '" + s.name + "' has no source tensor");
      const DType dtype = stored_dtype(source->info);
      const uint64_t bytes = shard_bytes(s, dtype_size(dtype));
      pieces.push_back({r, &s, source, dtype, bytes});
      per_rank[size_t(r)] +=
          (std::max<uint64_t>(bytes, 1) + kGranularity - 1) / kGranularity * kGranularity;
      layout.ranks.push_back(r);
    }
  // Each GPU's share of the budget is checked before the first byte goes up.
  for (int r = 0; r < plan.ranks(); ++r) {
    const int d = devices[size_t(r)];
    const uint64_t memory =
        options.device_memory_bytes > 0 ? options.device_memory_bytes : vmm_device_memory_bytes(d);
    const auto limit = uint64_t(double(memory) * options.memory_fraction);
    if (per_rank[size_t(r)] > limit)
      throw std::runtime_error("rank " + std::to_string(r) + "'s pieces take " +
                               std::to_string(per_rank[size_t(r)]) + " bytes, more than the " +
                               std::to_string(limit) +
                               " that --gpu-memory-fraction allows on GPU " + std::to_string(d) +
                               " (" + layout.gpu_uuids[size_t(r)] + ")");
  }

  auto store = std::make_unique<ShardedVmmStore>(std::move(layout));
  store->allocations_.resize(pieces.size());
  store->exported_.resize(pieces.size());
  checksums.assign(pieces.size(), 0);
  // One piece at a time per thread: cut on the host, rounded, hashed, then copied to its
  // rank's GPU. A failure leaves every allocation made so far to the store's destructor.
  parallel_for(pieces.size(), options.threads, [&](size_t i) {
    const Piece& p = pieces[i];
    const int device = store->layout_.devices[size_t(p.rank)];
    HEARTH_CUDA_CHECK(cudaSetDevice(device));  // this thread's current device, its context
    HEARTH_CUDA_CHECK(cudaFree(nullptr));
    const size_t source_size = dtype_size(p.source->info.dtype);
    std::vector<std::byte> cut(shard_bytes(*p.shard, source_size));
    copy_shard(*p.shard, source_size, p.source->data, cut);
    std::vector<std::byte> stored;
    if (p.dtype != p.source->info.dtype) {  // f32 -> bf16
      stored.resize(p.bytes);
      const auto* f = reinterpret_cast<const float*>(cut.data());
      auto* h = reinterpret_cast<uint16_t*>(stored.data());
      for (uint64_t e = 0; e < p.bytes / 2; ++e) h[e] = f32_to_bf16(f[e]);
    } else {
      stored = std::move(cut);
    }
    checksums[i] = xxh3_checksum(stored);
    VmmAllocation allocation = VmmAllocation::create(device, p.bytes);
    HEARTH_CUDA_CHECK(
        cudaMemcpy(allocation.data(), stored.data(), stored.size(), cudaMemcpyHostToDevice));
    store->exported_[i].reset(allocation.export_fd());
    store->allocations_[i] = std::move(allocation);
    if (options.progress && i % 64 == 63)
      std::fprintf(stderr, "upload: %zu of %zu pieces\n", i + 1, pieces.size());
  });
  uint64_t written = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    TensorInfo info = pieces[i].source->info;
    info.dtype = pieces[i].dtype;
    info.shape = pieces[i].shard->shape;
    info.bytes = pieces[i].bytes;
    written += info.bytes;
    store->add_tensor(StoredTensor{info, store->allocations_[i].data(),
                                   store->allocations_[i].size(), uint32_t(i)});
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  store->set(model.config(), {written, seconds, seconds});
  return store;
}

}  // namespace hearth
