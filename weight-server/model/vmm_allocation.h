// One CUDA VMM allocation mapped into this process: physical memory (created here, or imported
// from a POSIX file descriptor another process exported), its own reserved virtual range, the
// mapping and read/write access for the device. Released in reverse order on destruction; the
// driver keeps the physical memory alive while any process still maps it.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace hearth {

class VmmAllocation {
 public:
  VmmAllocation() = default;
  // Device-local memory of at least `bytes`, rounded up to the allocation granularity,
  // exportable as a POSIX file descriptor.
  static VmmAllocation create(int device, size_t bytes);
  // Maps memory exported by another process; `bytes` is the exported allocation's size.
  // Takes no ownership of `fd` (the caller closes it; the driver keeps its own reference).
  static VmmAllocation import(int fd, size_t bytes, int device);
  static size_t granularity(int device);

  VmmAllocation(VmmAllocation&& o) noexcept { *this = std::move(o); }
  VmmAllocation& operator=(VmmAllocation&& o) noexcept;
  VmmAllocation(const VmmAllocation&) = delete;
  VmmAllocation& operator=(const VmmAllocation&) = delete;
  ~VmmAllocation() { reset(); }

  // A new descriptor for this allocation, owned by the caller (to pass by SCM_RIGHTS).
  int export_fd() const;
  CUdeviceptr address() const { return address_; }
  void* data() const { return reinterpret_cast<void*>(address_); }
  size_t size() const { return size_; }

 private:
  void map(int device);
  void reset();
  CUmemGenericAllocationHandle handle_ = 0;
  CUdeviceptr address_ = 0;
  size_t size_ = 0;
  bool mapped_ = false;
};

// The 16-byte UUID of a device, as "GPU-xxxxxxxx-xxxx-..." like nvidia-smi prints it.
std::string cuda_device_uuid(int device);

}  // namespace hearth
