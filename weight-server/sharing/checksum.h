// xxh3 checksums of tensor bytes as they sit in an allocation. The server computes them when it
// loads a model and puts them in the manifest; a worker run with --verify-weights recomputes
// them over what it imported, so any difference between what was uploaded and what was mapped
// shows up by tensor name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "weight-server/model/dtype.h"

namespace hearth {

uint64_t xxh3_checksum(std::span<const std::byte> bytes);

// The checksum of `source` (elements of type `from`) as stored in type `to`. Either the types
// are equal, or f32 is rounded to bf16 as the GPU upload does; anything else throws.
uint64_t xxh3_checksum_as_stored(std::span<const std::byte> source, DType from, DType to);

// Incremental form, for bytes that arrive in pieces (copied back from a GPU in chunks).
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;

  void update(std::span<const std::byte> bytes);
  uint64_t digest() const;

 private:
  void* state_;  // XXH3_state_t, kept out of this header
};

// 16 lower-case hex digits: the manifest's spelling (JSON numbers lose bits above 2^53).
std::string checksum_to_hex(uint64_t checksum);
std::optional<uint64_t> checksum_from_hex(std::string_view text);

}  // namespace hearth
