#include "weight-server/model/vmm_allocation.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "weight-server/model/cuda_driver.h"

namespace hearth {

namespace {

CUmemAllocationProp allocation_properties(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

}  // namespace

size_t VmmAllocation::granularity(int device) {
  const CudaDriver& d = CudaDriver::get();
  CUmemAllocationProp prop = allocation_properties(device);
  size_t g = 0;
  check_cu(d.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
           "cuMemGetAllocationGranularity");
  return g;
}

VmmAllocation VmmAllocation::create(int device, size_t bytes) {
  const CudaDriver& d = CudaDriver::get();
  const size_t g = granularity(device);
  VmmAllocation a;
  a.size_ = (std::max<size_t>(bytes, 1) + g - 1) / g * g;
  CUmemAllocationProp prop = allocation_properties(device);
  check_cu(d.mem_create(&a.handle_, a.size_, &prop, 0), "cuMemCreate");
  a.map(device);
  return a;
}

VmmAllocation VmmAllocation::import(int fd, size_t bytes, int device) {
  const CudaDriver& d = CudaDriver::get();
  VmmAllocation a;
  a.size_ = bytes;
  check_cu(d.import_handle(&a.handle_, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
           "cuMemImportFromShareableHandle");
  a.map(device);
  return a;
}

void VmmAllocation::map(int device) {
  const CudaDriver& d = CudaDriver::get();
  // Each allocation gets its own reserved range, aligned to the granularity, so tensors are
  // 2 MiB aligned and can be unmapped independently.
  check_cu(d.address_reserve(&address_, size_, granularity(device), 0, 0), "cuMemAddressReserve");
  check_cu(d.mem_map(address_, size_, 0, handle_, 0), "cuMemMap");
  mapped_ = true;
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check_cu(d.set_access(address_, size_, &access, 1), "cuMemSetAccess");
}

int VmmAllocation::export_fd() const {
  int fd = -1;
  check_cu(
      CudaDriver::get().export_handle(&fd, handle_, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
      "cuMemExportToShareableHandle");
  return fd;
}

VmmAllocation& VmmAllocation::operator=(VmmAllocation&& o) noexcept {
  if (this != &o) {
    reset();
    handle_ = std::exchange(o.handle_, 0);
    address_ = std::exchange(o.address_, 0);
    size_ = std::exchange(o.size_, 0);
    mapped_ = std::exchange(o.mapped_, false);
  }
  return *this;
}

void VmmAllocation::reset() {
  if (!handle_ && !address_) return;
  // Errors are ignored: a destructor cannot throw, and a failure here means a dead context.
  const CudaDriver& d = CudaDriver::get();
  if (mapped_) d.mem_unmap(address_, size_);
  if (address_) d.address_free(address_, size_);
  if (handle_) d.mem_release(handle_);
  handle_ = 0;
  address_ = 0;
  size_ = 0;
  mapped_ = false;
}

std::string cuda_device_uuid(int device) {
  const CudaDriver& d = CudaDriver::get();
  CUdevice dev;
  check_cu(d.device_get(&dev, device), "cuDeviceGet");
  CUuuid uuid;
  check_cu(d.device_uuid(&uuid, dev), "cuDeviceGetUuid");
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char s[64];
  std::snprintf(s, sizeof s,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return s;
}

}  // namespace hearth
