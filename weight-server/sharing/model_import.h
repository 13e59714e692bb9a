// A worker attaching to a served model: fetch and check the manifest and map the files sent
// with it (shared_files.h), check the GPU, import one
// descriptor per tensor and map them (memfd: read-only mmap; vmm: import + reserve + map), and
// optionally recompute every tensor's checksum. The connection it runs on is the worker's
// lease; keep it open for as long as the weights are used.
#pragma once

#include <functional>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ipc/client.h"
#include "weight-server/sharing/manifest.h"
#include "weight-server/sharing/shared_files.h"
#include "weight-server/model/weight_store.h"

namespace hearth {

struct ImportOptions {
  bool verify = false;  // xxh3 of every tensor against the manifest
  int verify_threads = 4;
  // A model sharded for tensor parallelism is imported as one rank: only that rank's pieces are
  // received and mapped. Required for a sharded model, refused for an unsharded one.
  std::optional<int> rank = std::nullopt;
  // Without a rank, a sharded model is imported whole, every rank's pieces in a store of its own
  // (ImportedModel::ranks): what a worker that runs all ranks in process (the CPU engine, or
  // the CUDA engine driving N GPUs) needs; vmm ranks are each mapped on their own GPU.
  // False: a sharded model without a rank is refused.
  bool all_ranks = false;
  // vmm: called once the device is known (all_ranks: rank 0's), before the descriptors are
  // received, so a caller can start its own GPU set-up beside the import.
  std::function<void(const Manifest&, int device)> on_device = nullptr;
};

// Milliseconds per step, for the attach benchmark and the worker's timings.
struct ImportTimings {
  double manifest_ms = 0;  // request, receive and validate the manifest, map its files
  double gpu_ms = 0;       // vmm: find the device, create the CUDA context
  double import_ms = 0;    // receive every descriptor
  double map_ms = 0;       // check and map them
  double verify_ms = 0;    // recompute checksums (when asked)
};

struct FetchedManifest {
  Manifest manifest;
  SharedFiles files;
};

// The manifest a worker on `rank` (none: an unsharded worker) imports from `manifest`: the
// manifest itself when unsharded, the rank's view when sharded. Throws std::runtime_error when
// the two disagree (a sharded model without a rank, a rank of an unsharded model, a rank out of
// range).
Manifest manifest_for_rank(const Manifest& manifest, std::optional<int> rank);

// The local device of every rank of a sharded vmm manifest, found by each rank's GPU UUID.
// Throws std::runtime_error naming the rank whose GPU this process cannot see.
std::vector<int> vmm_devices_for_ranks(const Manifest& manifest);

// Asks the server for `model`'s manifest, validates it and checks and maps the files its reply
// carries. Throws as import_served_model does.
FetchedManifest fetch_manifest(ipc::Client& client, const std::string& model);

struct ImportedModel {
  Manifest manifest;  // all_ranks: the whole sharded manifest; else what was imported
  // One rank of a sharded model (ImportOptions::rank): the whole manifest, every rank's pieces
  // (what names the model whichever rank a process imported); empty otherwise.
  std::optional<Manifest> whole_manifest;
  SharedFiles files;
  std::shared_ptr<const WeightStore> store;               // all_ranks: rank 0's pieces
  std::vector<std::shared_ptr<const WeightStore>> ranks;  // all_ranks of a sharded model
  ImportTimings timings;
};

// Throws ipc::IpcError (and its ProtocolError for refusals such as an unknown model) for
// transport failures, std::runtime_error for anything wrong with what the server sent.
ImportedModel import_served_model(ipc::Client& client, const std::string& model,
                                  const ImportOptions& options = {});

// Recomputes the xxh3 of every tensor in `store` and compares it with the manifest. Throws
// std::runtime_error naming the first tensor that differs.
void verify_weights(const WeightStore& store, const Manifest& manifest, int threads = 4);

}  // namespace hearth
