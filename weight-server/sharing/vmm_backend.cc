// The vmm seam with CUDA compiled in (see vmm_backend.h).
#include "weight-server/sharing/vmm_backend.h"

#include <cuda_runtime.h>
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <map>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "weight-server/sharing/checksum.h"
#include "weight-server/model/cuda_driver.h"
#include "weight-server/model/device_store.h"
#include "kernels/cuda_check.h"
#include "kernels/cuda_handles.h"

namespace hearth {

namespace {

// A DeviceStore uploaded for sharing: the same tensors, plus export by allocation id. Each
// allocation is exported once, here: cuMemExportToShareableHandle is a driver call (~0.15 ms,
// serialised with other processes' driver work such as a worker creating its context), while
// a request only needs a dup of the descriptor.
class ExportedDeviceStore final : public ExportableStore {
 public:
  ExportedDeviceStore(std::unique_ptr<DeviceStore> device, double seconds)
      : device_(std::move(device)) {
    config_ = device_->config();
    for (const StoredTensor& t : device_->tensors()) add_tensor(t);
    timings_ = {device_->upload_stats().bytes, seconds, device_->upload_stats().seconds};
    exported_.reserve(device_->allocations().size());
    for (const VmmAllocation& a : device_->allocations()) exported_.emplace_back(a.export_fd());
  }
  Residence residence() const override { return Residence::Device; }
  const char* backend_name() const override { return "vmm"; }
  size_t allocation_count() const override { return device_->allocations().size(); }
  std::string gpu_uuid() const override { return device_->gpu_uuid(); }
  UniqueFd export_allocation(uint32_t id) const override {
    if (id >= device_->allocations().size())
      throw std::out_of_range("allocation " + std::to_string(id) +
                              " does not exist (the model has " +
                              std::to_string(device_->allocations().size()) + ")");
    // A fresh descriptor per request: the receiving process owns it, and it ends with it.
    const int fd = ::fcntl(exported_[id].get(), F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
      throw std::system_error(errno, std::generic_category(),
                              "duplicating the descriptor of allocation " + std::to_string(id));
    return UniqueFd(fd);
  }

 private:
  std::unique_ptr<DeviceStore> device_;
  std::vector<UniqueFd> exported_;  // one per allocation, in id order
};

// A KV chunk on the GPU: its VMM allocation (mapped here too, which costs address space only)
// and the descriptor exported once at creation.
class VmmKvChunk final : public KvChunkMemory {
 public:
  VmmKvChunk(int device, uint64_t bytes) : allocation_(VmmAllocation::create(device, bytes)) {
    exported_.reset(allocation_.export_fd());
    // Zeroed like the memfd chunks, so a fresh pool reads the same everywhere.
    HEARTH_CUDA_CHECK(cudaMemset(allocation_.data(), 0, allocation_.size()));
  }
  UniqueFd export_fd() const override {
    const int fd = ::fcntl(exported_.get(), F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
      throw std::system_error(errno, std::generic_category(), "duplicating a KV chunk's handle");
    return UniqueFd(fd);
  }
  // A VMM handle's descriptor names the allocation, not an access mode: there is no read-only
  // kind of it, and whoever imports it may map it read-write. The guard is the reader's own
  // mapping (VmmKvRange::map_read_only sets and checks read-only access), which a worker of
  // ours always uses for another worker's chunk; the server still sends only chunks that hold
  // published blocks, to clients of the same uid rules as any lease.
  UniqueFd export_read_only_fd() const override { return export_fd(); }

 private:
  VmmAllocation allocation_;
  UniqueFd exported_;
};

class VmmKvRange final : public KvChunkRange {
 public:
  VmmKvRange(int device, uint64_t bytes) : device_(device), bytes_(bytes) {
    check_cu(
        CudaDriver::get().address_reserve(&base_, bytes, VmmAllocation::granularity(device), 0, 0),
        "cuMemAddressReserve (KV range)");
  }
  ~VmmKvRange() override {
    // Errors are ignored: a destructor cannot throw, and a failure means a dead context.
    const CudaDriver& d = CudaDriver::get();
    for (const auto& [offset, bytes] : mapped_) d.mem_unmap(base_ + offset, bytes);
    d.address_free(base_, bytes_);
  }
  VmmKvRange(const VmmKvRange&) = delete;
  VmmKvRange& operator=(const VmmKvRange&) = delete;

  std::byte* base() const override { return reinterpret_cast<std::byte*>(base_); }
  void map(uint64_t offset, int fd, uint64_t bytes, const std::string& label) override {
    map_with(CU_MEM_ACCESS_FLAGS_PROT_READWRITE, offset, fd, bytes, label);
  }
  // Another worker's chunk (shared prefix KV, issue 22 item 3). The descriptor is the
  // allocation's handle, which carries no access mode (export_read_only_fd), so this mapping's
  // access, read-only for this device, is what keeps the reader from writing it. The driver is
  // asked what it granted, so a driver that maps more than asked is refused, not trusted.
  void map_read_only(uint64_t offset, int fd, uint64_t bytes, const std::string& label) override {
    map_with(CU_MEM_ACCESS_FLAGS_PROT_READ, offset, fd, bytes, label);
  }
  void unmap(uint64_t offset, uint64_t bytes) override {
    check_cu(CudaDriver::get().mem_unmap(base_ + offset, bytes), "cuMemUnmap (KV chunk)");
    mapped_.erase(offset);
  }

 private:
  void map_with(CUmemAccess_flags flags, uint64_t offset, int fd, uint64_t bytes,
                const std::string& label) {
    if (offset > bytes_ || bytes > bytes_ - offset)
      throw std::runtime_error(label + ": outside the reserved range");
    const CudaDriver& d = CudaDriver::get();
    const std::string what = label + ": ";
    CUmemGenericAllocationHandle handle = 0;
    check_cu(d.import_handle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
             (what + "cuMemImportFromShareableHandle (KV chunk)").c_str());
    // The mapping holds the memory from here on; the handle is not needed past cuMemMap.
    const CUresult mapped = d.mem_map(base_ + offset, bytes, 0, handle, 0);
    d.mem_release(handle);
    check_cu(mapped, (what + "cuMemMap (KV chunk; is it the size that was leased?)").c_str());
    mapped_.emplace(offset, bytes);
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device_;
    access.flags = flags;
    CUresult set = d.set_access(base_ + offset, bytes, &access, 1);
    unsigned long long granted = 0;
    if (set == CUDA_SUCCESS) set = d.get_access(&granted, &access.location, base_ + offset);
    if (set != CUDA_SUCCESS || granted != flags) {
      // Nothing half-mapped stays behind: the caller never sees this chunk.
      d.mem_unmap(base_ + offset, bytes);
      mapped_.erase(offset);
      check_cu(set, (what + "cuMemSetAccess (KV chunk, " + access_name(flags) + ")").c_str());
      throw std::runtime_error(what + "the driver granted access " + std::to_string(granted) +
                               " to a KV chunk mapped " + access_name(flags) + "; refusing it");
    }
  }
  static std::string access_name(CUmemAccess_flags flags) {
    return flags == CU_MEM_ACCESS_FLAGS_PROT_READ ? "read-only" : "read-write";
  }

  int device_;
  uint64_t bytes_;
  CUdeviceptr base_ = 0;
  std::map<uint64_t, uint64_t> mapped_;  // offset -> bytes
};

}  // namespace

std::unique_ptr<KvChunkRange> reserve_vmm_kv_range(int device, uint64_t bytes) {
  HEARTH_CUDA_CHECK(cudaSetDevice(device));
  return std::make_unique<VmmKvRange>(device, bytes);
}

uint64_t vmm_device_memory_bytes(int device) {
  HEARTH_CUDA_CHECK(cudaSetDevice(device));
  size_t free = 0, total = 0;
  HEARTH_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return total;
}

std::unique_ptr<KvChunkMemory> create_vmm_kv_chunk(int device, uint64_t bytes) {
  HEARTH_CUDA_CHECK(cudaSetDevice(device));
  return std::make_unique<VmmKvChunk>(device, bytes);
}

int vmm_device_count() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

bool vmm_gpu_available(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaSuccess && count > 0) return true;
  if (why)
    *why = std::string("no CUDA device was found (") +
           (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices") + ")";
  return false;
}

std::unique_ptr<ExportableStore> upload_vmm_store(const HfModel& model,
                                                  const VmmLoadOptions& options) {
  std::string why;
  if (!vmm_gpu_available(&why))
    throw std::runtime_error("the vmm backend needs a CUDA GPU: " + why);
  const auto start = std::chrono::steady_clock::now();
  UploadOptions upload;
  upload.device = options.device;
  upload.layout = DeviceLayout::PerTensor;
  upload.progress = options.progress;
  upload.threads = options.threads;
  std::unique_ptr<DeviceStore> device = DeviceStore::upload(model, upload);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return std::make_unique<ExportedDeviceStore>(std::move(device), seconds);
}

int vmm_device_for(const std::string& gpu_uuid) {
  std::string why;
  if (!vmm_gpu_available(&why))
    throw std::runtime_error("the server shares its weights on GPU " + gpu_uuid + ", but " + why +
                             " in this worker");
  int count = 0;
  HEARTH_CUDA_CHECK(cudaGetDeviceCount(&count));
  std::string seen;
  for (int d = 0; d < count; ++d) {
    const std::string uuid = cuda_device_uuid(d);
    if (uuid == gpu_uuid) return d;
    seen += (seen.empty() ? "" : ", ") + uuid;
  }
  throw std::runtime_error("the server's weights live on GPU " + gpu_uuid +
                           ", which this worker cannot see (its devices: " + seen +
                           "); run it on the server's GPU (check CUDA_VISIBLE_DEVICES)");
}

std::shared_ptr<const WeightStore> import_vmm_store(const Manifest& manifest,
                                                    std::vector<UniqueFd> fds, int device) {
  if (fds.size() != manifest.tensors.size())
    throw std::runtime_error("model '" + manifest.model + "': received " +
                             std::to_string(fds.size()) + " descriptors for " +
                             std::to_string(manifest.tensors.size()) + " tensors");
  HEARTH_CUDA_CHECK(cudaSetDevice(device));
  HEARTH_CUDA_CHECK(cudaFree(nullptr));
  std::vector<VmmAllocation> allocations;
  std::vector<StoredTensor> tensors;
  allocations.reserve(fds.size());
  tensors.reserve(fds.size());
  for (size_t i = 0; i < fds.size(); ++i) {
    const ManifestTensor& t = manifest.tensors[i];
    try {
      allocations.push_back(VmmAllocation::import(fds[i].get(), t.allocation_bytes, device));
    } catch (const std::exception& e) {
      throw std::runtime_error("model '" + manifest.model + "', tensor '" + t.info.name +
                               "': cannot import its allocation (" +
                               std::to_string(t.allocation_bytes) + " bytes): " + e.what());
    }
    fds[i].reset();  // the driver holds its own reference once imported
    tensors.push_back(StoredTensor{t.info, nullptr, t.allocation_bytes, uint32_t(i)});
  }
  return DeviceStore::adopt(manifest.config, std::move(tensors), std::move(allocations),
                            manifest.gpu_uuid);
}

uint64_t device_checksum(const void* device_address, uint64_t bytes) {
  static constexpr size_t kChunk = 64ull << 20;
  // A rank's pieces are mapped for its own device only: read them there.
  // The caller's current device comes back afterwards.
  int caller = 0;
  HEARTH_CUDA_CHECK(cudaGetDevice(&caller));
  cudaPointerAttributes where{};
  if (bytes > 0 && cudaPointerGetAttributes(&where, device_address) == cudaSuccess &&
      where.type == cudaMemoryTypeDevice && where.device != caller)
    HEARTH_CUDA_CHECK(cudaSetDevice(where.device));
  struct Restore {
    int device;
    ~Restore() { cudaSetDevice(device); }
  } restore{caller};
  PinnedBuffer buffer(std::min<uint64_t>(std::max<uint64_t>(bytes, 1), kChunk));
  Xxh3Stream stream;
  const auto* src = static_cast<const std::byte*>(device_address);
  for (uint64_t off = 0; off < bytes; off += buffer.bytes()) {
    const size_t n = size_t(std::min<uint64_t>(buffer.bytes(), bytes - off));
    HEARTH_CUDA_CHECK(cudaMemcpy(buffer.get(), src + off, n, cudaMemcpyDeviceToHost));
    stream.update({buffer.get<std::byte>(), n});
  }
  return stream.digest();
}

}  // namespace hearth
