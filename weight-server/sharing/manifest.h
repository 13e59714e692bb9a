// The manifest: everything a worker needs to run a served model without its directory. The
// model's name, its architecture (config.json as an object), the allocation backend, the GPU the
// allocations live on, one entry per shared file (tokenizer.json, tokenizer_config.json,
// generation_config.json and the tokenizer image the server built: name, size, xxh3 and the
// index of its sealed memfd among the descriptors of the manifest reply) and one entry per
// tensor: name, dtype, shape, bytes, allocation bytes, allocation id and the xxh3 checksum of
// the bytes as stored. It arrives over a socket from another process, so parsing checks every
// field and the tensor list against the architecture before anything is mapped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/frame.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/model/model_config.h"
#include "weight-server/model/safetensors.h"
#include "weight-server/model/shard_plan.h"
#include "weight-server/sharing/exportable_store.h"

namespace hearth {

// Bumped on any change a reader of an older version would misread.
// 2: the files travel as sealed memfds beside the manifest, no longer inline as text.
inline constexpr int kManifestVersion = 2;
// A model sharded for tensor parallelism (shard_plan.h): "tensor_parallel" and "ranks" instead of
// "tensors", so that a reader of version 2 refuses it by its version rather than misread it.
inline constexpr int kShardedManifestVersion = 3;
inline constexpr const char* kManifestFormat = "hearth-manifest";
// The largest manifest a `manifest` reply can carry: a frame, less room for the reply around it.
inline constexpr size_t kMaxManifestBytes = ipc::kDefaultMaxFrameBytes - 4096;

struct ManifestTensor {
  TensorInfo info;                // name, dtype, shape and bytes as stored in the allocation
  uint64_t allocation_bytes = 0;  // the allocation's size (>= info.bytes; rounded for vmm)
  uint64_t allocation = 0;        // the id to ask the server for; the tensor starts at offset 0
  uint64_t xxh3 = 0;              // of the info.bytes stored bytes
  // Sharded manifests only: the rank holding this piece and which slice of the whole tensor
  // (ShardPlan) it is; info.shape is the piece's.
  int rank = 0;
  TensorSlice slice;
};

// The files a manifest may name, in the order their descriptors are attached.
inline constexpr std::string_view kTokenizerJsonFile = "tokenizer.json";
inline constexpr std::string_view kTokenizerConfigFile = "tokenizer_config.json";
inline constexpr std::string_view kGenerationConfigFile = "generation_config.json";
// The server's tokenizer image of tokenizer.json (tokenizer/README.md).
inline constexpr std::string_view kTokenizerImageFile = "tokenizer.image";
inline constexpr std::string_view kManifestFileNames[] = {
    kTokenizerJsonFile, kTokenizerConfigFile, kGenerationConfigFile, kTokenizerImageFile};

// A file shared as a sealed memfd attached to the manifest reply; absent files are not listed
// (an empty file is absent).
struct ManifestFile {
  std::string name;    // one of kManifestFileNames
  uint64_t bytes = 0;  // > 0
  uint64_t xxh3 = 0;   // of the bytes
  uint32_t fd = 0;     // index among the manifest reply's descriptors
};

struct Manifest {
  std::string model;
  std::string backend;   // "memfd" | "vmm"
  std::string gpu_uuid;  // vmm: the device holding the allocations; memfd: empty
  nlohmann::json architecture = nlohmann::json::object();  // config.json
  ModelConfig config;                                      // parsed from `architecture`
  std::vector<ManifestFile> files;                         // fd i is files[i]
  std::vector<ManifestTensor> tensors;                     // in the architecture's order
  // 1: unsharded (version 2). N > 1: `tensors` holds rank 0's pieces, then rank 1's, ... each
  // rank's in the architecture's order, and devices[r] is rank r's CUDA device (-1 for memfd)
  // as the server numbers them, device_uuids[r] its UUID ("" for memfd): a worker finds its
  // device by UUID, since CUDA_VISIBLE_DEVICES may number them otherwise. For vmm, gpu_uuid
  // is rank 0's.
  int tensor_parallel = 1;
  std::vector<int> devices;
  std::vector<std::string> device_uuids;

  bool sharded() const { return tensor_parallel > 1; }
  // The manifest a worker on `rank` imports: only that rank's pieces, its gpu_uuid the rank's
  // device's. Throws std::runtime_error for an unsharded manifest or a rank outside
  // 0..tensor_parallel-1.
  Manifest rank_view(int rank) const;

  const ManifestFile* file(std::string_view name) const;  // null when absent

  uint64_t tensor_bytes() const;
  uint64_t allocation_bytes() const;
  std::vector<uint64_t> allocation_ids() const;
};

// The manifest of `store`, loaded from `model` under `name`; `checksums[i]` belongs to
// store.tensors()[i]; `files` are the shared files, their `fd` their index.
Manifest build_manifest(const std::string& name, const HfModel& model, const ExportableStore& store,
                        const std::vector<uint64_t>& checksums, std::vector<ManifestFile> files);

// The manifest of a store holding `plan`'s pieces, rank after rank (`ranks[i]` and `slices[i]`
// belong to store.tensors()[i]); `devices` and `device_uuids` per rank (-1 and "" on the host).
Manifest build_sharded_manifest(const std::string& name, const HfModel& model,
                                const ExportableStore& store,
                                const std::vector<uint64_t>& checksums,
                                std::vector<ManifestFile> files, const ShardPlan& plan,
                                const std::vector<int>& ranks, std::vector<int> devices,
                                std::vector<std::string> device_uuids);

// The manifest as JSON. Throws std::runtime_error when it would not fit in a reply
// (kMaxManifestBytes), so that a server refuses such a model when loading it.
nlohmann::json manifest_to_json(const Manifest& manifest);

// Reads and validates a manifest: format and version, field types, backend, known file names
// with distinct descriptor indexes 0..n-1, dtype/shape/bytes consistency, unique allocation
// ids, and exactly the tensors (names and shapes) that expected_tensors() gives for the
// architecture; a sharded one (version 3): every rank 0..N-1 once, each with exactly its pieces of
// ShardPlan::make(config, N) (no piece missing, overlapping another or shaped otherwise), and for
// vmm a distinct device index and UUID per rank, rank 0's UUID the top-level one. Throws
// std::runtime_error naming the model, the tensor and the field at fault.
Manifest parse_manifest(const nlohmann::json& json);

}  // namespace hearth
