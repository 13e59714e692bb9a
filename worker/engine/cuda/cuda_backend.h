// LEGACY PATH. The single-sequence CUDA backend (`cuda_engine: single`), kept until the kernel
// issue (23) retires it; the default CUDA backend is the batched one (cuda_batch_backend.h,
// `cuda_engine: batched`), and each backend is to keep one forward. New work goes there.
//
// The same Llama-family graph as the CPU engine, on GPU-resident weights.
// Prefill runs cuBLASLt GEMMs and the flash-style attention kernel over chunks of the prompt;
// decode runs hearth's GEMV kernels and split-context attention, captured once as a CUDA graph
// and replayed per token. Sampling happens on the device with the host sampler's rules; only
// the chosen token and its logprob come back.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <optional>
#include <vector>

#include "kernels/cuda_handles.h"
#include "kernels/device_buffer.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "worker/engine/backend.h"
#include "worker/engine/cuda/cuda_warmup.h"
#include "worker/engine/cuda/cuda_weights.h"
#include "worker/engine/engine_options.h"
#include "weight-server/model/weight_store.h"

namespace hearth {

class CudaBackend final : public Backend {
 public:
  // `warmup`, when given, already holds the context and a warmed-up cuBLASLt (cuda_warmup.h).
  CudaBackend(std::shared_ptr<const WeightStore> store, const EngineOptions& options,
              int context_length, std::shared_ptr<CudaWarmup> warmup = nullptr);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  int context_length() const override { return context_; }
  int vocab_size() const override { return c_.vocab; }

  // Behind the batched interface this is still a one-sequence engine with its own contiguous
  // KV cache: batches hold one entry, block tables are ignored, and the pool it reports is one
  // context long, which is all the engine needs to account for that one sequence. The batched,
  // paged CUDA backend replaces it.
  KvPoolShape kv_pool() const override { return kv_; }
  int max_sequences() const override { return 1; }
  bool paged_kv() const override { return false; }  // one contiguous cache of its own
  void forward(const ForwardBatch& batch) override;
  std::span<const float> logits(int entry) override;
  std::vector<SampleResult> sample(std::span<const SampleRequest> requests) override;
  // Its sampler starts the next step ahead on the device; structured output needs the batched
  // engine (cuda_engine: batched) or the CPU.
  bool token_masks() const override { return false; }

  // The one sequence directly (benchmarks): runs `tokens` at positions [start_pos, +n),
  // forgetting positions past them, so a caller may rewind.
  void forward(std::span<const int32_t> tokens, int start_pos);
  // The last forward's logits, copied to the host; valid until the next forward.
  std::span<const float> logits();
  // Picks the next token on the device from the last forward's logits.
  SampledToken sample(const SamplingParams& params, std::span<const int32_t> seen, uint64_t step);

  // Waits for everything queued, including a decode step sample() started ahead.
  void synchronize();

  // Device memory this backend allocated (activations, KV cache), excluding weights.
  size_t workspace_bytes() const { return workspace_bytes_; }
  const WeightStore& store() const { return *store_; }

 private:
  DeviceBuffer alloc(size_t bytes);
  void decode_step(int parity);              // token and position from params_
  void launch_decode(int parity);            // eagerly, or by replaying the captured graph
  void prefill_chunk(int n, int start_pos);  // tokens already in d_tokens_
  void layer_decode(int l);
  void layer_prefill(int l, int n, int start_pos);
  void lm_head(int row, int parity);
  void gemv(kernels::GemvEpilogue epilogue, const kernels::GemvArgs& args);
  void upload_seen(std::span<const int32_t> seen);
  void* k_cache(int l) const;
  void* v_cache(int l) const;

  std::shared_ptr<const WeightStore> store_;
  const ModelConfig& c_;
  EngineOptions options_;
  int context_, chunk_;
  KvPoolShape kv_;
  kernels::Half type_;
  CudaStream stream_;  // declared before the buffers and handles below: destroyed after them
  std::unique_ptr<kernels::Gemm> gemm_;

  CudaWeights weights_;

  size_t workspace_bytes_ = 0;
  DeviceBuffer x_, xn_, q32_, k32_, v32_, q16_, att_, gate_, up_, act_;
  DeviceBuffer logits_[2];  // alternate steps write alternate buffers (see sample())
  DeviceBuffer k_cache_, v_cache_, attn_scratch_, attn_counters_, argmax_scratch_, sample_scratch_,
      seen_, tokens_, params_, result_;
  struct Params {
    int32_t token;
    int32_t pos;
  };
  struct Result {
    int32_t token;
    float logprob;
  };
  PinnedBuffer host_params_, host_result_;

  CudaGraphExec decode_graph_[2];
  int eager_decodes_ = 0;
  int current_ = 0;    // logits_[current_] holds the last forward's logits
  int last_pos_ = -1;  // position of the last token forwarded
  // A decode step already running for the sampled token at the next position, launched by
  // sample() so the GPU need not wait for the host between tokens.
  struct Ahead {
    int32_t token;
    int pos;
  };
  std::optional<Ahead> ahead_;
  CudaEvent result_ready_;
  std::vector<float> host_logits_;
  bool host_logits_valid_ = false;
  std::vector<int32_t> uploaded_seen_;
};

}  // namespace hearth
