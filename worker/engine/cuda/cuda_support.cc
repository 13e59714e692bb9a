// The CUDA side of the worker/engine seam (see cuda_support.h).
#include "worker/engine/cuda_support.h"

#include <cuda_runtime.h>

#include <stdexcept>

#include "weight-server/model/device_store.h"
#include "worker/engine/cuda/cuda_backend.h"
#include "worker/engine/cuda/cuda_batch_backend.h"
#include "worker/engine/cuda/cuda_tp_backend.h"
#include "worker/engine/cuda/cuda_warmup.h"
#include "worker/engine/model_weights.h"

namespace hearth {

bool cuda_device_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

std::shared_ptr<CudaWarmup> start_cuda_warmup(int device, DType type) {
  if (type != DType::BF16 && type != DType::F16) return nullptr;
  return std::make_shared<CudaWarmup>(
      device, type == DType::BF16 ? kernels::Half::BF16 : kernels::Half::F16);
}

std::unique_ptr<Backend> make_cuda_backend(const EngineOptions& options,
                                           const EngineWeights& weights, int context_length,
                                           std::shared_ptr<CudaWarmup> warmup,
                                           const KvMemoryFactory& kv_memory) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0)
    throw std::runtime_error(std::string("no CUDA device was found (") +
                             (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices") +
                             "); use --backend cpu");
  const bool batched = options.cuda_engine == CudaEngineKind::Batched;
  std::shared_ptr<const WeightStore> store = weights.store;
  if (options.tensor_parallel > 1 || !weights.ranks.empty()) {
    // One process, one GPU per rank: a served model's ranks as the server cut them, else each
    // rank's pieces cut here from the host-resident model. A vmm server's ranks lease their
    // pools on their GPUs; a memfd server's chunks are host memory, no place for a GPU pool, so
    // those ranks (uploaded here) size their own pools.
    if (!batched) throw std::runtime_error("tensor_parallel on the GPU needs cuda_engine batched");
    warmup.reset();
    if (!weights.ranks.empty())
      return std::make_unique<CudaTpBackend>(
          weights.ranks, options, context_length,
          weights.ranks[0]->residence() == Residence::Device ? kv_memory : nullptr);
    if (store->residence() != Residence::Host)
      throw std::runtime_error(
          "tensor_parallel on the GPU cuts its ranks from a model opened "
          "in process or served sharded, not from one GPU-resident copy");
    return std::make_unique<CudaTpBackend>(*store, options, context_length);
  }
  if (store->residence() == Residence::Host) {
    if (!weights.source)
      throw std::runtime_error("the cuda backend cannot run on host-resident (" +
                               std::string(store->backend_name()) + ") weights");
    // The upload takes seconds: time enough for the engine's own set-up beside it.
    int device = 0;
    if (!warmup && !batched && cudaGetDevice(&device) == cudaSuccess)
      warmup = start_cuda_warmup(device, bind_weights(*store).embed.dtype);
    UploadOptions opt;
    opt.layout = options.weights_layout == WeightsLayout::Packed ? DeviceLayout::Packed
                                                                 : DeviceLayout::PerTensor;
    opt.progress = weights.source->total_bytes() > (2ull << 30);
    store = DeviceStore::upload(*weights.source, opt);
  }
  if (batched) {
    warmup.reset();  // the batched engine uses no cuBLASLt; this waits for the helper thread
    return std::make_unique<CudaBatchBackend>(std::move(store), options, context_length, kv_memory);
  }
  return std::make_unique<CudaBackend>(std::move(store), options, context_length,
                                       std::move(warmup));
}

}  // namespace hearth
