#include "worker/engine/cuda/cuda_tp_rank.h"

#include <stdexcept>
#include <string>

#include "kernels/all_reduce.h"
#include "kernels/cuda_check.h"
#include "kernels/device_scope.h"
#include "weight-server/model/rank_store.h"
#include "worker/engine/cuda/device_rank_store.h"

namespace hearth {

namespace {

using kernels::DeviceScope;

// What the batched kernels take of one rank's shapes, refused before anything is allocated.
void check_rank_shapes(const ModelConfig& rc, int rank) {
  const int hd = rc.head_dim;
  if (hd != 16 && hd != 32 && hd != 64 && hd != 128)
    throw std::runtime_error("the batched cuda backend supports head_dim 16, 32, 64 or 128, not " +
                             std::to_string(hd));
  for (auto [what, k] : {std::pair{"hidden_size", rc.hidden},
                         {"q_dim per rank", rc.q_dim()},
                         {"intermediate_size per rank", rc.intermediate}})
    if (k % 16 != 0)
      throw std::runtime_error("tensor parallel rank " + std::to_string(rank) + ": " + what +
                               " must be a multiple of 16, not " + std::to_string(k));
}

}  // namespace

CudaTpRankUnit::CudaTpRankUnit(int rank, int device, const ModelConfig& whole,
                               const ShardPlan& plan, std::shared_ptr<const WeightStore> store,
                               const EngineOptions& options, int context_length,
                               const StepLimits& limits, AllReduce all_reduce)
    : rank_(rank), device_(device), config_(whole) {
  DeviceScope scope(device_);
  const RankDims dims = plan.dims(rank);
  config_.n_heads = dims.q_heads;
  config_.n_kv_heads = dims.kv_heads;
  config_.intermediate = dims.intermediate;
  config_.vocab = dims.vocab_end - dims.vocab_begin;
  vocab_begin_ = dims.vocab_begin;
  vocab_end_ = dims.vocab_end;
  check_rank_shapes(config_, rank);
  stream_ = make_stream();
  done_ = make_event();
  store_ = std::move(store);
  weights_ = CudaWeights::bind(*store_, config_);
  weights_.check_kv_cache_dtype(options.kv_cache_dtype);
  arena_.count(weights_.copied_bytes());
  CudaTpRank tp;
  tp.vocab_begin = dims.vocab_begin;
  tp.vocab_end = dims.vocab_end;
  tp.all_reduce = std::move(all_reduce);
  model_ = std::make_unique<CudaLlamaForward>(config_, weights_, limits, options, context_length,
                                              arena_, stream_.get(), tp);
  inputs_ = std::make_unique<StepInputs>(limits, options.kv_block_size, arena_);
}

CudaTpRankUnit::~CudaTpRankUnit() {
  if (stream_) cudaStreamSynchronize(stream_.get());
}

void CudaTpRankUnit::make_kv_pool(const EngineOptions& options, int context_length,
                                  const KvMemoryFactory& lease) {
  DeviceScope scope(device_);
  kv_ = std::make_unique<CudaKvPool>(config_, options, context_length, stream_.get(), arena_, lease,
                                     rank_);
}

StepShape CudaTpRankUnit::upload_inputs(int kv_bound) {
  DeviceScope scope(device_);
  StepShape shape = inputs_->upload(stream_.get());
  if (kv_bound > 0) shape.max_kv_len = kv_bound;  // a graph's bound, not this step's
  return shape;
}

void CudaTpRankUnit::begin(const StepShape& shape) {
  DeviceScope scope(device_);
  model_->begin(shape, *inputs_, *kv_, stream_.get());
}

void CudaTpRankUnit::run_layer(int layer, Part part, const StepShape& shape) {
  DeviceScope scope(device_);
  model_->run_layer(layer, part, shape, *inputs_, *kv_, stream_.get());
}

void CudaTpRankUnit::finish(const StepShape& shape) {
  DeviceScope scope(device_);
  model_->finish(shape, *inputs_, stream_.get());
}

void CudaTpRankUnit::launch(const StepShape& shape) {
  DeviceScope scope(device_);
  model_->launch(shape, *inputs_, *kv_, stream_.get());
}

void CudaTpRankUnit::capture_graph(const GraphKey& key, const StepShape& shape) {
  DeviceScope scope(device_);
  cudaStream_t s = stream_.get();
  cudaGraph_t captured = nullptr;
  HEARTH_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  try {
    model_->launch(shape, *inputs_, *kv_, s);
  } catch (...) {
    cudaStreamEndCapture(s, &captured);
    if (captured) cudaGraphDestroy(captured);
    throw;
  }
  HEARTH_CUDA_CHECK(cudaStreamEndCapture(s, &captured));
  const CudaGraph graph(captured);
  cudaGraphExec_t exec = nullptr;
  HEARTH_CUDA_CHECK(cudaGraphInstantiate(&exec, graph.get(), 0));
  graphs_.insert_or_assign(key, CudaGraphExec(exec));
}

void CudaTpRankUnit::replay_graph(const GraphKey& key) {
  DeviceScope scope(device_);
  HEARTH_CUDA_CHECK(cudaGraphLaunch(graphs_.at(key).get(), stream_.get()));
}

void CudaTpRankUnit::copy_logits(float* whole, int vocab, const StepShape& s) {
  DeviceScope scope(device_);
  const int width = vocab_end_ - vocab_begin_;
  HEARTH_CUDA_CHECK(cudaMemcpy2DAsync(whole + size_t(s.logits_row) * vocab + vocab_begin_,
                                      size_t(vocab) * 4, model_->logits(s.logits_row),
                                      size_t(width) * 4, size_t(width) * 4, size_t(s.rows),
                                      cudaMemcpyDefault, stream_.get()));
  HEARTH_CUDA_CHECK(cudaEventRecord(done_.get(), stream_.get()));
}

int checked_gpu_ranks(const EngineOptions& options) {
  const int n = options.tensor_parallel;
  int present = 0;
  const cudaError_t err = cudaGetDeviceCount(&present);
  if (err != cudaSuccess) present = 0;
  if (n < 2 || n > kernels::kMaxAllReduceRanks)
    throw std::runtime_error("the cuda backend's tensor_parallel runs 2.." +
                             std::to_string(kernels::kMaxAllReduceRanks) + " GPUs, not " +
                             std::to_string(n));
  if (n > present)
    throw std::runtime_error("tensor_parallel " + std::to_string(n) + " needs " +
                             std::to_string(n) + " GPUs; " + std::to_string(present) +
                             " are present");
  if (options.cuda_engine != CudaEngineKind::Batched)
    throw std::runtime_error("tensor_parallel on the GPU needs the batched cuda engine");
  return n;
}

int served_rank_device(const WeightStore& store, const ShardPlan& plan, int rank) {
  for (const TensorShard& piece : plan.tensors(rank))
    if (store.at(piece.name).info.shape != piece.shape)
      throw std::runtime_error("rank " + std::to_string(rank) + "'s tensor '" + piece.name +
                               "' is not the shape the shard plan gives it");
  if (store.residence() != Residence::Device) return -1;
  cudaPointerAttributes at{};
  HEARTH_CUDA_CHECK(cudaPointerGetAttributes(&at, store.tensors().at(0).data));
  if (at.type != cudaMemoryTypeDevice)
    throw std::runtime_error("rank " + std::to_string(rank) + "'s pieces are not GPU memory");
  return at.device;
}

std::shared_ptr<const WeightStore> upload_rank_pieces(const WeightStore& whole,
                                                      const ShardPlan& plan, int rank, int device) {
  if (whole.residence() != Residence::Host)
    throw std::runtime_error(
        "tensor_parallel on the GPU cuts its ranks from host-resident weights");
  const RankStore pieces(whole, plan, rank);  // host copy, dropped once on the GPU
  return std::make_shared<DeviceRankStore>(pieces, device);
}

}  // namespace hearth
