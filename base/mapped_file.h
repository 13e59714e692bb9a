// A read-only memory mapping of a whole file or file descriptor, unmapped on destruction.
// Safetensors shards are used straight from the page cache through it, memfd-backed weights
// received from a weight server are mapped the same way, and so are tokenizer.json and the
// tokenizer images built from it.
//
// A mapped file must not shrink while it is mapped (that would fault on access). Tokenizer
// images are only ever replaced by rename, never rewritten in place, so a mapping of the old file
// stays valid.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace hearth {

class MappedFile {
 public:
  // kYes faults every page in at once, for a file about to be read whole (checksummed, hashed).
  enum class Prefault { kNo, kYes };

  MappedFile() = default;
  // Maps `path` read-only; throws std::runtime_error naming the file on failure, also when it
  // is not a regular file (a FIFO is refused, not waited on).
  static MappedFile open(const std::filesystem::path& path, Prefault prefault = Prefault::kNo);
  // Maps the whole of an open regular file; `path` names it in errors.
  static MappedFile map_file(int fd, const std::filesystem::path& path,
                             Prefault prefault = Prefault::kNo);
  // Maps `size` bytes of an open descriptor read-only (the descriptor may be closed afterwards).
  static MappedFile map_fd(int fd, size_t size, const std::string& label,
                           Prefault prefault = Prefault::kNo);

  MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() { reset(); }

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  std::string_view text() const { return {reinterpret_cast<const char*>(data_), size_}; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void reset();
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace hearth
