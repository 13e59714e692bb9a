// A read-only mapping of a whole file, unmapped on destruction: how tokenizer images and the
// tokenizer.json they are keyed by are read without copying. (weight-server/ has the general
// MappedFile; the tokenizer library stays free of that dependency.)
//
// A mapped file must not shrink while it is mapped (that would fault on access). Images in the
// tokenizer cache are only ever replaced by rename, never rewritten in place, so a mapping of
// the old file stays valid.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string_view>

namespace hearth::tok {

class FileMapping {
 public:
  // Throws std::runtime_error naming the file and the system error.
  explicit FileMapping(const std::filesystem::path& path);
  ~FileMapping();
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  std::string_view text() const { return {reinterpret_cast<const char*>(data_), size_}; }

 private:
  const std::byte* data_ = nullptr;  // null for an empty file
  size_t size_ = 0;
};

}  // namespace hearth::tok
