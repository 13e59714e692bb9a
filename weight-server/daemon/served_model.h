// A model as the server holds it: its weights in exportable allocations (memfd or vmm), its
// small files in sealed memfds and the manifest workers receive. Loading reads the directory
// once, writes or uploads every tensor, checksums the bytes as stored, and builds the tokenizer
// image once so that no worker has to parse tokenizer.json.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "weight-server/sharing/exportable_store.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/sharing/manifest.h"
#include "weight-server/sharing/shared_files.h"
#include "weight-server/daemon/model_spec.h"
#include "weight-server/daemon/requester_identity.h"

namespace hearth {

struct ServedModel {
  std::string name;
  std::filesystem::path dir;
  std::unique_ptr<ExportableStore> store;
  SharedFileSet files;          // attached to every manifest reply
  nlohmann::json manifest;      // manifest_to_json, built once
  double image_seconds = 0;     // building the tokenizer image
  double open_seconds = 0;      // reading and validating the directory
  double checksum_seconds = 0;  // hashing every tensor as stored
  double total_seconds = 0;     // the whole load

  // Name, backend, sizes and load timings, as list and stats report them.
  nlohmann::json summary() const;
};

struct ServeOptions {
  std::string backend = "memfd";  // "memfd" | "vmm"
  int device = 0;                 // vmm
  // > 1: every tensor split into this many ranks' pieces (shard_plan.h), each its own
  // allocation: a sealed memfd, or with vmm one VMM allocation on rank r's GPU, devices[r]
  // (empty: 0..N-1; tensor_parallel_devices.h checks the list).
  int tensor_parallel = 1;
  std::vector<int> devices;
  // vmm with tensor_parallel > 1: each GPU's pieces within this share of its memory
  // (device_memory_bytes > 0 stands for each GPU's size, as --memory-mb does).
  double memory_fraction = 1.0;
  uint64_t device_memory_bytes = 0;
  int threads = 4;  // writers/uploaders and hashers
  bool progress = false;
  // Quantize a 16/32-bit model's projections to fp8 at load (quantize_at_load.h); a model
  // already in fp8 is served as it is.
  bool quantize_fp8 = false;
  std::function<void(std::string_view)> log;  // progress and summary lines; null: silent
  // Whose rights open the model's files: an admin `load` opens them as the admin
  // (requester_identity.h); unset, as the server (its own --model directories).
  std::optional<Requester> open_as;
};

// Throws std::runtime_error naming the directory, tensor or device at fault.
std::unique_ptr<ServedModel> load_served_model(const ModelSpec& spec, const ServeOptions& options);

}  // namespace hearth
