#include "worker/tp/tp_backend.h"

#include <stdexcept>

#include "weight-server/model/shard_plan.h"
#include "worker/engine/backend_factory.h"
#include "worker/engine/cpu_backend.h"
#include "worker/engine/ranked_kv_memory.h"
#include "worker/tp/cuda_process_tp.h"
#include "worker/tp/remote_kv_memory.h"

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
  // Served with a lease (the worker's factory), every rank leases its own pool from its device's
  // budget (rank r's from device r), each holding its heads of a block, at most kv.num_blocks
  // and at least one context, as the in-process ranks' pools (rank_lease): rank 0's here, each
  // follower's in its process; otherwise each rank's pool is its own.
  const int n = options.tensor_parallel;
  const bool leased = served && kv_memory;
  hello.kv_leased = leased;
  std::shared_ptr<KvMemory> own_pool;
  if (leased) {
    const RankLease lease = rank_lease(per_token, n, kv.block_size, kv.num_blocks, context);
    own_pool = kv_memory(lease.block_bytes, lease.max_blocks, lease.min_blocks, 0);
  }
  // Rank 0's pool shares (the worker's kv_share): every follower's does, so the ranks share
  // rank by rank (ranked_kv_memory.h).
  hello.kv_shared = own_pool && own_pool->shared();
  std::vector<TpKvState> follower_kv(static_cast<size_t>(n));
  std::shared_ptr<TpProcessGroup> group = TpProcessGroup::start(
      hello, processes, nullptr, leased ? collect_kv_states(follower_kv) : nullptr);
  // As the GPU ranks' leader (cuda_process_tp.cc): every rank holds the same blocks, grown and
  // shrunk together.
  std::shared_ptr<KvMemory> memory =
      leased ? join_leased_pools(std::move(own_pool), group, follower_kv) : nullptr;
  // Served, the store is rank 0's pieces; single-process, the backend cuts them from it.
  std::vector<std::shared_ptr<const WeightStore>> own;
  if (served) own.push_back(weights.store);
  return std::make_unique<CpuBackend>(weights.store, context, kv, std::move(memory), n,
                                      std::move(own), options.kv_cache_dtype, std::move(group));
}

}  // namespace hearth
