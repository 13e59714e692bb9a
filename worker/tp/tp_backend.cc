#include "worker/tp/tp_backend.h"

#include <stdexcept>

#include "weight-server/model/shard_plan.h"
#include "worker/engine/backend_factory.h"
#include "worker/engine/cpu_backend.h"
#include "worker/tp/cuda_process_tp.h"

namespace hearth {

std::unique_ptr<Backend> make_process_tp_backend(const EngineOptions& options,
                                                 const EngineWeights& weights,
                                                 const TpModelSource& source,
                                                 const TpProcessOptions& processes,
                                                 const KvMemoryFactory& kv_memory) {
  if (options.tensor_parallel < 2)
    throw std::runtime_error("tensor_parallel_processes needs tensor_parallel of 2 or more, got " +
                             std::to_string(options.tensor_parallel));
  if (resolve_backend(options.backend) == BackendKind::Cuda)
    return make_cuda_process_tp_backend(options, weights, source, processes, kv_memory);
  const bool served = !source.server_socket.empty();
  if (served ? !weights.ranks.empty() || weights.source : !weights.source)
    throw std::runtime_error(
        "tensor_parallel_processes: the leader holds rank 0's pieces only (served: imported as "
        "rank 0), and each follower its own");
  const ModelConfig& config = weights.store->config();
  ShardPlan::make(config, options.tensor_parallel);  // refuses counts that do not divide, here
  const int context = resolve_context_length(options, config);
  const int64_t per_token = CpuBackend::kv_bytes_per_token(config, options.kv_cache_dtype);
  const KvPoolShape kv = resolve_kv_pool(options, context, per_token);
  TpHello hello;
  hello.world_size = options.tensor_parallel;
  if (!served) hello.model_dir = source.dir.string();
  hello.server_socket = source.server_socket;
  hello.model_name = source.model_name;
  hello.model_identity = source.identity;
  hello.quantize_fp8 = source.quantize_fp8;
  hello.context_length = context;
  hello.kv_block_size = kv.block_size;
  hello.kv_blocks = kv.num_blocks;
  hello.kv_cache_dtype = std::string(option_name(options.kv_cache_dtype));
  // The CPU ranks' pools are their own (a leased pool per rank process: not yet).
  std::shared_ptr<TpProcessGroup> group = TpProcessGroup::start(hello, processes);
  // Served, the store is rank 0's pieces; single-process, the backend cuts them from it.
  std::vector<std::shared_ptr<const WeightStore>> own;
  if (served) own.push_back(weights.store);
  return std::make_unique<CpuBackend>(weights.store, context, kv, nullptr, options.tensor_parallel,
                                      std::move(own), options.kv_cache_dtype, std::move(group));
}

}  // namespace hearth
