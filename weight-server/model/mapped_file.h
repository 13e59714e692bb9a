// A read-only memory mapping of a whole file or file descriptor, unmapped on destruction.
// Safetensors shards are used straight from the page cache through it, and memfd-backed
// weights received from a weight server are mapped the same way.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>

namespace hearth {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path` read-only; throws std::runtime_error naming the file on failure, also when it
  // is not a regular file (a FIFO is refused, not waited on).
  static MappedFile open(const std::filesystem::path& path);
  // Maps the whole of an open regular file; `path` names it in errors.
  static MappedFile map_file(int fd, const std::filesystem::path& path);
  // Maps `size` bytes of an open descriptor read-only (the descriptor may be closed afterwards).
  static MappedFile map_fd(int fd, size_t size, const std::string& label);

  MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() { reset(); }

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void reset();
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace hearth
