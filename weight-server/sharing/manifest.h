// The manifest: everything a worker needs to run a served model without its directory. The
// model's name, its architecture (config.json as an object), the tokenizer and generation files,
// the allocation backend, the GPU the allocations live on, and one entry per tensor: name,
// dtype, shape, bytes, allocation bytes, allocation id and the xxh3 checksum of the bytes as
// stored. It arrives over a socket from another process, so parsing checks every field and the
// tensor list against the architecture before anything is mapped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/frame.h"
#include "weight-server/model/model_config.h"
#include "weight-server/model/safetensors.h"

namespace hearth {

// Bumped on any change a reader of an older version would misread.
inline constexpr int kManifestVersion = 1;
inline constexpr const char* kManifestFormat = "hearth-manifest";
// The largest manifest a `manifest` reply can carry: a frame, less room for the reply around it.
inline constexpr size_t kMaxManifestBytes = ipc::kDefaultMaxFrameBytes - 4096;

struct ManifestTensor {
  TensorInfo info;                // name, dtype, shape and bytes as stored in the allocation
  uint64_t allocation_bytes = 0;  // the allocation's size (>= info.bytes; rounded for vmm)
  uint64_t allocation = 0;        // the id to ask the server for; the tensor starts at offset 0
  uint64_t xxh3 = 0;              // of the info.bytes stored bytes
};

struct Manifest {
  std::string model;
  std::string backend;   // "memfd" | "vmm"
  std::string gpu_uuid;  // vmm: the device holding the allocations; memfd: empty
  nlohmann::json architecture = nlohmann::json::object();  // config.json
  ModelConfig config;                                      // parsed from `architecture`
  std::string tokenizer_json, tokenizer_config_json, generation_config_json;  // "" when absent
  std::vector<ManifestTensor> tensors;  // in the architecture's order

  uint64_t tensor_bytes() const;
  uint64_t allocation_bytes() const;
  std::vector<uint64_t> allocation_ids() const;
};

// The manifest as JSON. Throws std::runtime_error naming the largest file when it would not fit
// in a reply (kMaxManifestBytes), so that a server refuses such a model when loading it.
nlohmann::json manifest_to_json(const Manifest& manifest);

// Reads and validates a manifest: format and version, field types, backend, dtype/shape/bytes
// consistency, unique allocation ids, and exactly the tensors (names and shapes) that
// expected_tensors() gives for the architecture. Throws std::runtime_error naming the model,
// the tensor and the field at fault.
Manifest parse_manifest(const nlohmann::json& json);

}  // namespace hearth
