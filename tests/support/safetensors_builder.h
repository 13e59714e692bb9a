// Builds safetensors images in memory for tests: valid ones, and ones with a header written by
// hand to exercise the reader's error paths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hearth::test {

// An image with `header` as its JSON header (space-padded to keep the data 8-byte aligned, as
// writers do) and `data_bytes` bytes of data after it; `declared_len` overrides the length field.
inline std::vector<std::byte> safetensors_image(std::string header, size_t data_bytes,
                                                uint64_t declared_len = UINT64_MAX) {
  header.append((8 - (8 + header.size()) % 8) % 8, ' ');
  std::vector<std::byte> out(8 + header.size() + data_bytes);
  const uint64_t len = declared_len == UINT64_MAX ? header.size() : declared_len;
  for (int i = 0; i < 8; ++i) out[i] = std::byte((len >> (8 * i)) & 0xff);
  for (size_t i = 0; i < header.size(); ++i) out[8 + i] = std::byte(header[i]);
  for (size_t i = 0; i < data_bytes; ++i) out[8 + header.size() + i] = std::byte(i * 7 + 1);
  return out;
}

struct TensorSpec {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
};

// A valid image holding `tensors` back to back; header padded to keep data 8-byte aligned.
inline std::vector<std::byte> valid_safetensors(const std::vector<TensorSpec>& tensors) {
  nlohmann::json h = nlohmann::json::object();
  uint64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    uint64_t bytes = t.dtype == "F32" ? 4 : t.dtype == "F8_E4M3" ? 1 : 2;
    for (int64_t d : t.shape) bytes *= uint64_t(d);
    h[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  return safetensors_image(h.dump(), offset);
}

}  // namespace hearth::test
