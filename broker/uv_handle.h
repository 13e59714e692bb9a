#pragma once

#include <uv.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace hearth::broker {

// Throws std::runtime_error("<what>: <libuv message>") if rc is a libuv error.
inline void check_uv(int rc, const char* what) {
  if (rc < 0) throw std::runtime_error(std::string(what) + ": " + uv_strerror(rc));
}

// Owns one libuv handle (uv_poll_t, uv_timer_t, ...). libuv closes handles asynchronously, so
// destruction calls uv_close and the memory is freed by the close callback; the loop must run
// once more afterwards, which EventLoop's destructor does.
template <typename T>
class UvHandle {
 public:
  UvHandle() = default;
  UvHandle(UvHandle&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  UvHandle& operator=(UvHandle&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  UvHandle(const UvHandle&) = delete;
  UvHandle& operator=(const UvHandle&) = delete;
  ~UvHandle() { reset(); }

  // Allocates a handle and initialises it with `init(T*)` (e.g. uv_timer_init bound to a loop).
  // `data` becomes handle->data, which the callbacks use to find their owner.
  template <typename Init>
  static UvHandle make(Init&& init, void* data, const char* what) {
    T* handle = new T{};
    const int rc = init(handle);
    if (rc < 0) {
      delete handle;  // never registered with the loop, so no uv_close
      check_uv(rc, what);
    }
    handle->data = data;
    return UvHandle(handle);
  }

  T* get() const noexcept { return handle_; }
  explicit operator bool() const noexcept { return handle_ != nullptr; }

  void reset() noexcept {
    if (handle_ == nullptr) return;
    uv_close(reinterpret_cast<uv_handle_t*>(std::exchange(handle_, nullptr)),
             [](uv_handle_t* h) { delete reinterpret_cast<T*>(h); });
  }

 private:
  explicit UvHandle(T* handle) noexcept : handle_(handle) {}
  T* handle_ = nullptr;
};

}  // namespace hearth::broker
