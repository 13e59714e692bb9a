// A model as a worker runs it: weights in a store plus the text files that describe them,
// whether opened from a directory (single-process mode) or received from a weight server.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weight-server/sharing/model_import.h"
#include "weight-server/model/weight_store.h"
#include "worker/engine/engine_weights.h"
#include "tokenizer/tokenizer_loader.h"

namespace hearth {

class Tokenizer;

class HfModel;

struct WorkerModel {
  EngineWeights weights() const { return {store, source, ranks}; }
  std::string name;
  std::shared_ptr<const WeightStore> store;
  std::shared_ptr<const HfModel> source;  // single-process mode: the directory, for uploads
  // Served mode, a model the server sharded: every rank's pieces (store is rank 0's).
  std::vector<std::shared_ptr<const WeightStore>> ranks;
  std::string identity;  // for the prefix cache's domain (model_identity.h)
  // Into `source` (single-process) or `files` (served), which keep it alive; empty when absent.
  std::string_view tokenizer_json;
  std::string tokenizer_config_json, generation_config_json;  // "" when absent
  // Served mode: the files the server shared with the manifest, the tokenizer image among them.
  std::shared_ptr<const SharedFiles> files;
  // Served mode: the connection to the server, held open as this worker's lease on the weights
  // until the model is dropped. Nothing reads it while generating, so a server that exits
  // meanwhile goes unnoticed: the mappings outlive it.
  std::shared_ptr<ipc::Client> server;
  double connect_ms = 0;  // served mode: connecting and hello
  ImportTimings import_timings;
};

// Single-process mode: maps the directory's safetensors and uses them in place, or with
// `quantize_fp8` a 16/32-bit model's projections quantized at load (quantize_at_load.h; an fp8
// model is used as it is).
WorkerModel open_model_dir(const std::filesystem::path& dir, bool quantize_fp8 = false);

struct ServedModelOptions {
  bool verify_weights = false;  // xxh3 of every imported tensor against the manifest
  // vmm: the device is known and the descriptors are about to be received (ImportOptions).
  std::function<void(const Manifest&, int device)> on_device = nullptr;
  // The uid the server must run as (ipc::ClientOptions::server_uid); unset: the default rule.
  std::optional<uid_t> server_uid = std::nullopt;
  // A model the server sharded, imported as this one rank (only its pieces: `store`); unset,
  // every rank's (`ranks`). Tensor-parallel processes import one rank each (worker/tp/).
  std::optional<int> rank = std::nullopt;
};

// Served mode: connects to the hearth-server at `socket` ("hearth server not running at PATH"
// when nobody listens), fetches `name`'s manifest, imports and maps every tensor.
WorkerModel attach_served_model(const std::string& socket, const std::string& name,
                                const ServedModelOptions& options = {});

// The model's tokenizer (nullopt when it has none) through load_tokenizer: served, from the
// server's image (falling back to parsing the shared tokenizer.json, with one line on stderr);
// single-process, through the image cache.
std::optional<LoadedTokenizer> load_model_tokenizer(const WorkerModel& model);

// End-of-sequence ids: generation_config.json's, else config.json's, plus the tokenizer
// config's eos_token when the tokenizer knows it.
std::vector<int32_t> end_of_sequence_ids(const WorkerModel& model, const Tokenizer* tokenizer);

}  // namespace hearth
