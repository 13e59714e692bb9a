// Reader for the safetensors format: an 8-byte little-endian header length, a JSON header
// describing each tensor (dtype, shape, byte range), then the data. The header is untrusted
// input: every field is validated and every error names the file and the tensor.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "weight-server/model/dtype.h"
#include "base/mapped_file.h"

namespace hearth {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;

  uint64_t numel() const;
  std::string shape_string() const;  // "[4096, 128]"
};

// One tensor of a parsed file: its description and where its bytes start, relative to the file.
struct SafetensorsEntry {
  TensorInfo info;
  uint64_t file_offset = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // in file order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // the data region: after the length and the header
  uint64_t data_size = 0;
};

// Largest header accepted; the reference implementation uses the same bound.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// Parses and validates the header of a whole file image. `label` names the file in errors.
// Throws std::runtime_error on any malformed, inconsistent or unsupported content.
SafetensorsHeader parse_safetensors(std::span<const std::byte> file, const std::string& label);
// The two halves of parse_safetensors: every tensor's description and range (each within the
// data), then the layout (the tensors tile the data region exactly, with no overlap or gap).
SafetensorsHeader parse_safetensors_tensors(std::span<const std::byte> file,
                                            const std::string& label);
void check_safetensors_layout(const SafetensorsHeader& header, const std::string& label);

// A mapped safetensors file with its validated header.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::filesystem::path& path);
  // Whether open() checks the layout. A model defers it until it has matched the tensors'
  // names against its config, so that a tensor missing from a header is named, not reported as
  // the gap its bytes leave. Until check_layout() the tensors may overlap.
  enum class Layout { kCheck, kDeferred };
  // A file already open (e.g. beneath a model directory); `path` names it in errors.
  static SafetensorsFile open(int fd, const std::filesystem::path& path,
                              Layout layout = Layout::kCheck);
  void check_layout() const;

  const std::filesystem::path& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  std::span<const std::byte> data(const SafetensorsEntry& entry) const {
    return mapping_.bytes().subspan(entry.file_offset, entry.info.bytes);
  }

 private:
  std::filesystem::path path_;
  MappedFile mapping_;
  SafetensorsHeader header_;
};

}  // namespace hearth
