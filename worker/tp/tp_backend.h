// The leader's backend when tensor-parallel ranks run as processes (engine option
// tensor_parallel_processes): a CPU backend of rank 0 over a process group whose followers
// each load their own rank's pieces from the same model directory; with the cuda backend, rank
// 0 on GPU 0 and rank r on GPU r (worker/tp/cuda_process_tp.h).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "worker/engine/backend.h"
#include "worker/engine/engine_options.h"
#include "worker/engine/engine_weights.h"
#include "worker/engine/kv_memory.h"
#include "worker/tp/process_group.h"

namespace hearth {

// Where the followers find the model: the directory the leader opened, its identity
// (model_identity.h) for them to check, and whether it was quantized at load; or, served, the
// server's socket and the model's name (the leader imported rank 0's pieces, each follower
// imports its own).
struct TpModelSource {
  std::filesystem::path dir;
  std::string server_socket, model_name;
  std::string identity;
  bool quantize_fp8 = false;
};

// Throws std::runtime_error naming the cause: tensor_parallel below 2, a
// served model imported otherwise than as rank 0, a follower that cannot start. `kv_memory`
// (served: CPU ranks on a memfd server, GPU ranks on a vmm server): rank 0's pool is leased
// through it, each follower leases its own from its rank's device (its GPU, or device r's budget
// of a memfd server), and the engine grows and shrinks them together.
std::unique_ptr<Backend> make_process_tp_backend(const EngineOptions& options,
                                                 const EngineWeights& weights,
                                                 const TpModelSource& source,
                                                 const TpProcessOptions& processes = {},
                                                 const KvMemoryFactory& kv_memory = nullptr);

}  // namespace hearth
