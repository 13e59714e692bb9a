// RAII owners of the CUDA runtime's handles, so a throw halfway through a constructor leaks
// nothing: streams, events, instantiated graphs and pinned host memory. (Device memory has
// DeviceBuffer.) Destructors never throw; a failure there means the context is already gone.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "kernels/cuda_check.h"

namespace hearth {

// One handle of type T, released by Destroy. Move-only; null means none.
template <typename T, cudaError_t (*Destroy)(T)>
class CudaHandle {
 public:
  CudaHandle() = default;
  explicit CudaHandle(T handle) : handle_(handle) {}
  CudaHandle(CudaHandle&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  CudaHandle& operator=(CudaHandle&& o) noexcept {
    if (this != &o) reset(std::exchange(o.handle_, nullptr));
    return *this;
  }
  CudaHandle(const CudaHandle&) = delete;
  CudaHandle& operator=(const CudaHandle&) = delete;
  ~CudaHandle() { reset(); }

  T get() const { return handle_; }
  explicit operator bool() const { return handle_ != nullptr; }
  void reset(T handle = nullptr) {
    if (handle_) Destroy(handle_);
    handle_ = handle;
  }

 private:
  T handle_ = nullptr;
};

using CudaStream = CudaHandle<cudaStream_t, cudaStreamDestroy>;
using CudaEvent = CudaHandle<cudaEvent_t, cudaEventDestroy>;
using CudaGraphExec = CudaHandle<cudaGraphExec_t, cudaGraphExecDestroy>;
using CudaGraph = CudaHandle<cudaGraph_t, cudaGraphDestroy>;

inline CudaStream make_stream(unsigned flags = cudaStreamNonBlocking) {
  cudaStream_t s = nullptr;
  HEARTH_CUDA_CHECK(cudaStreamCreateWithFlags(&s, flags));
  return CudaStream(s);
}

inline CudaEvent make_event(unsigned flags = cudaEventDisableTiming) {
  cudaEvent_t e = nullptr;
  HEARTH_CUDA_CHECK(cudaEventCreateWithFlags(&e, flags));
  return CudaEvent(e);
}

// Pinned (page-locked) host memory: the source or target of asynchronous copies.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes) HEARTH_CUDA_CHECK(cudaMallocHost(&ptr_, bytes));
  }
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_) cudaFreeHost(ptr_);
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr_) cudaFreeHost(ptr_);
  }

  template <typename T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace hearth
