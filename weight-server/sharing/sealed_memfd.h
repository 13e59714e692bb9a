// One tensor's allocation in the `memfd` backend: an anonymous in-memory file written once and
// then sealed against writing, growing and shrinking, so that every process it is shared with
// can map it read-only and rely on its contents and size never changing under it.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/unique_fd.h"

namespace hearth {

class SealedMemfd {
 public:
  SealedMemfd() = default;
  // memfd_create + write `bytes` + seal (write, grow, shrink, seal). `name` shows up in
  // /proc/PID/fd and /proc/PID/maps; it is cut to what the kernel accepts. Throws
  // std::runtime_error naming `name` on failure.
  static SealedMemfd create(const std::string& name, std::span<const std::byte> bytes);

  int fd() const { return fd_.get(); }
  uint64_t size() const { return size_; }
  // A new descriptor for the same file (to hand to a worker), close-on-exec.
  UniqueFd duplicate() const;

 private:
  UniqueFd fd_;
  uint64_t size_ = 0;
};

// The seals a shared weight file must carry before a worker maps it.
inline constexpr int kRequiredWeightSeals =
    0x0008 /*F_SEAL_WRITE*/ | 0x0004 /*F_SEAL_GROW*/ | 0x0002 /*F_SEAL_SHRINK*/;

// Checks that `fd`, received from a server, is a sealed memfd of exactly `size` bytes: one the
// sender can no longer write, grow or shrink. Mapping anything else could let the sender change
// weights under a running worker, or truncate the file and kill it with SIGBUS. Throws
// std::runtime_error that starts with `label` and says what is wrong.
void check_sealed_memfd(int fd, uint64_t size, const std::string& label);

}  // namespace hearth
