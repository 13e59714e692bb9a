#include "worker/engine/cuda/cuda_tp_backend.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/all_reduce.h"
#include "kernels/cuda_check.h"
#include "kernels/device_scope.h"
#include "weight-server/model/shard_plan.h"
#include "worker/engine/ranked_kv_memory.h"

namespace hearth {

namespace {

using kernels::DeviceScope;

}  // namespace

CudaTpBackend::CudaTpBackend(const WeightStore& whole, const EngineOptions& options,
                             int context_length)
    : c_(whole.config()),
      options_(options),
      context_(context_length),
      limits_(StepLimits::of(options, context_length)) {
  const int n = checked_gpu_ranks(options_);
  const ShardPlan plan = ShardPlan::make(c_, n);  // names the count that does not divide
  std::vector<int> devices;
  for (int r = 0; r < n; ++r) devices.push_back(r);
  build(devices, [&](int r) { return upload_rank_pieces(whole, plan, r, r); });
}

CudaTpBackend::CudaTpBackend(std::vector<std::shared_ptr<const WeightStore>> ranks,
                             const EngineOptions& options, int context_length,
                             const KvMemoryFactory& kv_memory)
    : c_(ranks.empty() ? ModelConfig{} : ranks[0]->config()),
      options_(options),
      context_(context_length),
      limits_(StepLimits::of(options, context_length)) {
  if (int(ranks.size()) != options_.tensor_parallel)
    throw std::runtime_error("the model is sharded for tensor parallel " +
                             std::to_string(ranks.size()) + ", the engine's tensor_parallel is " +
                             std::to_string(options_.tensor_parallel) +
                             "; set tensor_parallel=" + std::to_string(ranks.size()));
  const int n = checked_gpu_ranks(options_);
  const ShardPlan plan = ShardPlan::make(c_, n);
  std::vector<int> devices;
  for (int r = 0; r < n; ++r) {
    // A store of pieces from elsewhere must hold exactly this rank's shapes; host pieces go
    // to GPU r, GPU-resident ones stay where they are.
    const int at = served_rank_device(*ranks[size_t(r)], plan, r);
    const int device = at < 0 ? r : at;
    if (std::find(devices.begin(), devices.end(), device) != devices.end())
      throw std::runtime_error(
          "ranks " +
          std::to_string(std::find(devices.begin(), devices.end(), device) - devices.begin()) +
          " and " + std::to_string(r) + " are on the same GPU " + std::to_string(device));
    devices.push_back(device);
  }
  build(
      devices,
      [&](int r) -> std::shared_ptr<const WeightStore> {
        const std::shared_ptr<const WeightStore>& store = ranks[size_t(r)];
        if (store->residence() == Residence::Device) return store;
        return std::make_shared<DeviceRankStore>(*store, devices[size_t(r)]);
      },
      kv_memory);
}

void CudaTpBackend::build(const std::vector<int>& devices,
                          const std::function<std::shared_ptr<const WeightStore>(int)>& pieces,
                          const KvMemoryFactory& kv_memory) {
  const int n = int(devices.size());
  if (options_.kv_block_size <= 0)
    throw std::runtime_error("kv_block_size must be positive, got " +
                             std::to_string(options_.kv_block_size));
  if (context_ < 1) throw std::runtime_error("context_length must be positive");
  const ShardPlan plan = ShardPlan::make(c_, n);
  all_reduce_ =
      std::make_unique<kernels::PeerAllReduce>(devices, int64_t(limits_.max_tokens) * c_.hidden);
  for (int r = 0; r < n; ++r) {
    kernels::PeerAllReduce* ar = all_reduce_.get();
    auto all_reduce = [ar, r](const float* partial, float* x, int64_t count, bool accumulate,
                              const kernels::AllReduceNorm* norm, cudaStream_t stream) {
      return ar->run(r, partial, x, count, accumulate, stream, norm);
    };
    std::shared_ptr<const WeightStore> store;
    {
      DeviceScope scope(devices[size_t(r)]);
      store = pieces(r);
    }
    auto rank = std::make_unique<CudaTpRankUnit>(r, devices[size_t(r)], c_, plan, std::move(store),
                                                 options_, context_, limits_, all_reduce);
    if (r == 0) {
      DeviceScope scope(rank->device());
      logits_ = rank->arena().alloc(size_t(limits_.max_seqs) * c_.vocab * 4);
      sampling_ = std::make_unique<CudaSampling>(limits_.max_seqs, c_.vocab, rank->arena());
      token_mask_ = std::make_unique<CudaTokenMask>(c_.vocab);
      step_start_ = make_event();
    }
    ranks_.push_back(std::move(rank));
  }
  if (kv_memory) {
    // Served: rank r's pool leased from its GPU's budget on the server, as many blocks as
    // every rank holds (RankedKvMemory keeps them equal).
    std::vector<std::shared_ptr<KvMemory>> pools;
    for (int r = 0; r < n; ++r) {
      CudaTpRankUnit& rank = *ranks_[size_t(r)];
      rank.make_kv_pool(options_, context_, kv_memory);
      // Owned by the rank's pool, which outlives leased_ (declared after ranks_).
      pools.push_back(std::shared_ptr<KvMemory>(rank.kv().memory(), [](KvMemory*) {}));
    }
    leased_ = std::make_shared<RankedKvMemory>(std::move(pools));
    kv_shape_ = ranks_[0]->kv().shape();
    synchronize();
    return;
  }
  // Rank 0's pool is sized by the engine's KV policy from what its GPU has free (it holds the
  // most besides: the gathered logits and sampling); the others take exactly as many blocks, so
  // one block table addresses every rank's pool.
  for (int r = 0; r < n; ++r) {
    CudaTpRankUnit& rank = *ranks_[size_t(r)];
    EngineOptions o = options_;
    if (r > 0) {
      o.kv_pool_tokens = int64_t(kv_shape_.num_blocks) * kv_shape_.block_size;
      o.kv_pool_gb = 0;
      o.kv_pool_fraction = 0;
    }
    rank.make_kv_pool(o, context_);
    if (r == 0) kv_shape_ = rank.kv().shape();
    if (rank.kv().shape().num_blocks != kv_shape_.num_blocks)
      throw std::runtime_error("tensor parallel rank " + std::to_string(r) + "'s KV pool holds " +
                               std::to_string(rank.kv().shape().num_blocks) + " blocks, rank 0's " +
                               std::to_string(kv_shape_.num_blocks));
  }
  synchronize();
}

KvPoolShape CudaTpBackend::kv_pool() const {
  // Other workers' blocks sit past every rank's own at the same ids (RankedKvMemory finds
  // them so), read-only on each rank's GPU.
  return leased_ ? leased_kv_pool(kv_shape_.block_size, *leased_) : kv_shape_;
}

CudaTpBackend::~CudaTpBackend() {
  for (const auto& rank : ranks_) cudaStreamSynchronize(rank->stream());
}

void CudaTpBackend::synchronize() {
  for (const auto& rank : ranks_) HEARTH_CUDA_CHECK(cudaStreamSynchronize(rank->stream()));
}

void CudaTpBackend::run_substep(const ForwardBatch& batch, const SubStep& step, int& logits_row) {
  // The same sub-step on every rank: the host side is identical, each rank uploads its own copy.
  for (const auto& rank : ranks_) rank->inputs().begin(logits_row);
  for (size_t e = step.first; e < step.last; ++e) {
    const int n = int(batch.entries[e].tokens.size());
    const int lo = e == step.first ? step.first_token : 0;
    const int hi = e + 1 == step.last ? step.last_token : n;
    int row = -1;
    for (const auto& rank : ranks_) row = rank->inputs().add(batch.entries[e], lo, hi);
    if (row >= 0) entry_row_[e] = row, logits_row = row + 1;
  }
  launch_eager(upload_inputs(0));
}

std::vector<StepShape> CudaTpBackend::upload_inputs(int kv_bound) {
  std::vector<StepShape> shapes;
  for (const auto& rank : ranks_) shapes.push_back(rank->upload_inputs(kv_bound));
  return shapes;
}

void CudaTpBackend::launch_eager(const std::vector<StepShape>& shapes) {
  // Part by part, each on every rank before the next on any: a part ends with its all-reduce,
  // which waits on the GPU for the peers' (see CudaTpRank).
  for (size_t r = 0; r < ranks_.size(); ++r) ranks_[r]->begin(shapes[r]);
  using Part = CudaTpRankUnit::Part;
  for (int l = 0; l < c_.n_layers; ++l)
    for (Part part : {Part::Attention, Part::Mlp})
      for (size_t r = 0; r < ranks_.size(); ++r) ranks_[r]->run_layer(l, part, shapes[r]);
  for (size_t r = 0; r < ranks_.size(); ++r) ranks_[r]->finish(shapes[r]);
  gather_logits(shapes[0]);
}

void CudaTpBackend::gather_logits(const StepShape& s) {
  if (s.rows == 0) return;
  // Rank r's vocabulary columns of the rows this sub-step computed, into rank 0's logits.
  for (const auto& rank : ranks_) rank->copy_logits(logits_.get<float>(), c_.vocab, s);
  DeviceScope scope(ranks_[0]->device());
  for (size_t r = 1; r < ranks_.size(); ++r)
    HEARTH_CUDA_CHECK(cudaStreamWaitEvent(ranks_[0]->stream(), ranks_[r]->done(), 0));
}

// A decode step, padded to its bucket as the batched backend pads it: eager the first time
// (interleaved, so every kernel is loaded on every GPU), then each rank's whole forward captured
// on its own stream, then replayed: one launch per rank, the ranks meeting at the all-reduces
// on the GPUs.
void CudaTpBackend::run_decode(const ForwardBatch& batch, const DecodeStepPlan& plan) {
  for (const auto& rank : ranks_) add_decode_rows(rank->inputs(), batch, plan, entry_row_);
  const std::vector<StepShape> shapes = upload_inputs(plan.kv_bound);
  const std::pair key{plan.seqs, plan.kv_bound};
  if (!ranks_[0]->has_graph(key)) {
    if (eager_runs_[key]++ == 0) return launch_eager(shapes);
    for (size_t r = 0; r < ranks_.size(); ++r) ranks_[r]->capture_graph(key, shapes[r]);
  }
  for (const auto& rank : ranks_) rank->replay_graph(key);
  gather_logits(shapes[0]);
}

void CudaTpBackend::forward(const ForwardBatch& batch) {
  check_batch(batch);
  // Every rank's writes into rank 0's logits follow whatever rank 0 last did with them.
  {
    DeviceScope scope(ranks_[0]->device());
    HEARTH_CUDA_CHECK(cudaEventRecord(step_start_.get(), ranks_[0]->stream()));
  }
  for (const auto& rank : ranks_) {
    DeviceScope scope(rank->device());
    HEARTH_CUDA_CHECK(cudaStreamWaitEvent(rank->stream(), step_start_.get(), 0));
    rank->kv().prepare(rank->stream());
  }
  entry_row_.assign(batch.entries.size(), -1);
  host_logits_.assign(batch.entries.size(), {});
  if (const auto plan =
          plan_decode_step(batch, options_.cuda_graphs, limits_.max_step_seqs, context_))
    return run_decode(batch, *plan);
  int logits_row = 0;
  for (const SubStep& step : split_substeps(batch, limits_.max_tokens, limits_.max_step_seqs))
    run_substep(batch, step, logits_row);
}

void CudaTpBackend::capture_decode_graphs(int max_kv_len) {
  // A leased pool holding no block yet captures later, as the batched backend's.
  if (!options_.cuda_graphs || kv_pool().num_blocks == 0) return;
  capture_every_decode_bucket(
      max_kv_len, context_, kv_shape_.block_size, limits_.max_step_seqs,
      [&](const ForwardBatch& batch) { forward(batch); },
      [&](int seqs, int kv_bound) {
        return ranks_[0]->has_graph({seqs, kv_bound});
      });
  synchronize();
}

std::span<const float> CudaTpBackend::logits(int entry) {
  if (entry < 0 || entry >= int(entry_row_.size()) || entry_row_[entry] < 0)
    throw std::runtime_error("batch entry " + std::to_string(entry) +
                             " has no logits: it did not ask for them in the last forward");
  std::vector<float>& host = host_logits_[entry];
  if (host.empty()) {
    DeviceScope scope(ranks_[0]->device());
    host.resize(c_.vocab);
    HEARTH_CUDA_CHECK(
        cudaMemcpyAsync(host.data(), logits_.get<float>() + size_t(entry_row_[entry]) * c_.vocab,
                        size_t(c_.vocab) * 4, cudaMemcpyDeviceToHost, ranks_[0]->stream()));
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(ranks_[0]->stream()));
  }
  return host;
}

std::vector<SampleResult> CudaTpBackend::sample(std::span<const SampleRequest> requests) {
  if (requests.empty()) return {};
  DeviceScope scope(ranks_[0]->device());
  cudaStream_t s = ranks_[0]->stream();
  token_mask_->apply(requests, entry_row_, logits_.get<float>(), s);
  return sampling_->sample(requests, entry_row_, logits_.get<float>(), s);
}

}  // namespace hearth
