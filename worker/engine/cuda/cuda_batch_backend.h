// The batched CUDA engine: one forward pass over every sequence of a step (decodes and prompt
// chunks together), their keys and values in a paged pool on the device, sampling for all rows
// at once on the GPU. It runs the batch-invariant kernels of kernels/batch_ops.h, so a
// sequence's logits and tokens are bit-identical whatever else shares its steps, wherever it
// sits in them, and however its prompt was chunked.
//
// A step runs as:
//   embedding -> per layer: rmsnorm, q/k/v projections (fp32), paged_kv_write (bias, head norm,
//   RoPE, k/v into the pool), paged_attention, o_proj accumulated into the residual, rmsnorm,
//   gate/up with SwiGLU fused, down accumulated -> the rows that want logits gathered, final
//   norm, lm_head.
// Steps of more tokens than the activations hold are cut into sub-steps (chunked prefill gives
// the same bits). Decode steps (one token per sequence, each wanting logits) are replayed from
// CUDA graphs captured per bucket of sequence count and key length; the bucket's padding rows
// write no KV (slot -1) and, the kernels being row-invariant, never touch the real rows.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <map>
#include <memory>
#include <vector>

#include "kernels/batch_ops.h"
#include "kernels/cuda_handles.h"
#include "kernels/device_buffer.h"
#include "kernels/gemm.h"
#include "weight-server/model/weight_store.h"
#include "worker/engine/backend.h"
#include "worker/engine/cuda/cuda_weights.h"
#include "worker/engine/engine_options.h"

namespace hearth {

class CudaBatchBackend final : public Backend {
 public:
  // `store` must be GPU-resident with 16-bit matrices. The KV pool takes kv_pool_tokens,
  // kv_pool_gb or kv_pool_fraction of the memory free once everything else is allocated
  // (default 0.9 of it), never more than max_running full contexts.
  CudaBatchBackend(std::shared_ptr<const WeightStore> store, const EngineOptions& options,
                   int context_length);
  ~CudaBatchBackend() override;

  std::string name() const override { return "cuda"; }
  int context_length() const override { return context_; }
  int vocab_size() const override { return c_.vocab; }
  KvPoolShape kv_pool() const override { return kv_; }
  int max_sequences() const override { return max_seqs_; }

  void forward(const ForwardBatch& batch) override;
  std::span<const float> logits(int entry) override;
  std::vector<SampleResult> sample(std::span<const SampleRequest> requests) override;

  // Bytes one token position takes in the pool (keys and values of every layer, 16-bit).
  static int64_t kv_bytes_per_token(const ModelConfig& config);

  // Device memory this backend allocated, excluding weights; the KV pool's share of it.
  size_t workspace_bytes() const { return workspace_bytes_; }
  size_t kv_pool_bytes() const { return kv_pool_bytes_; }
  int decode_graphs() const { return int(graphs_.size()); }
  void synchronize();

  // Captures the decode graphs of every sequence-count bucket up to max_sequences(), for keys
  // of up to max_kv_len positions, so that serving never pauses for a capture. It runs steps
  // that write block 0 of the pool: nothing may be using the pool yet (as forward_alone).
  void capture_decode_graphs(int max_kv_len);

  // The matrices of a step, for batch_matmul's tiling table.
  enum MatmulShape { kQ, kKV, kO, kGateUp, kDown, kLmHead, kMatmulShapes };
  // Row-count bands of the tiling table: up to 16, 32, 64, ..., 2048 rows, then more.
  static constexpr int kMatmulBands = 9;
  static int matmul_band(int m);
  using TilingTable = std::array<std::array<kernels::MatmulTiles, kMatmulBands>, kMatmulShapes>;
  const TilingTable& matmul_tiling() const { return tiles_; }

 private:
  // One sub-step as the kernels see it: sizes known to the host.
  struct StepShape {
    int tokens = 0, seqs = 0, rows = 0;  // rows: tokens whose logits are computed
    int max_kv_len = 0;
    int logits_row = 0;  // first row of logits_ this step writes
  };
  // Where each array of a step's metadata lives, the same offsets in pinned and device memory.
  struct MetaLayout {
    size_t tokens, pos, slot, query_start, first_pos, rows, block_table, bytes;
  };

  DeviceBuffer alloc(size_t bytes);
  void run_substep(const ForwardBatch& batch, size_t first, size_t last, int first_token,
                   int last_token, int& logits_row);
  bool graphable(const ForwardBatch& batch) const;
  void run_decode(const ForwardBatch& batch);
  void launch(const StepShape& shape);  // every kernel of one step, on stream_
  void layer(int l, const StepShape& shape, const kernels::PagedAttentionArgs& attention);
  void matmul(MatmulShape shape, kernels::MatmulEpilogue epilogue, const void* a, const void* w,
              const void* w_up, void* out, int m, int n, int k);
  // batch_invariant: false: cuBLASLt, whose kernel choice (and so the bits) depends on M.
  void cublas_matmul(kernels::MatmulEpilogue epilogue, const void* a, const void* w,
                     const void* w_up, void* out, int m, int n, int k);
  void tune_matmuls();
  void upload_meta(int seqs);
  template <typename T>
  T* host_meta(size_t offset) const {
    return reinterpret_cast<T*>(host_meta_.get<char>() + offset);
  }
  template <typename T>
  T* dev_meta(size_t offset) const {
    return reinterpret_cast<T*>(meta_.get<char>() + offset);
  }
  void* k_pool(int l) const;
  void* v_pool(int l) const;

  std::shared_ptr<const WeightStore> store_;
  const ModelConfig& c_;
  EngineOptions options_;
  int context_;
  kernels::Half type_;
  KvPoolShape kv_;
  int max_tokens_;     // tokens per sub-step
  int max_seqs_;       // sequences per forward
  int max_step_seqs_;  // sequences per sub-step: min(max_tokens_, max_seqs_)
  int max_blocks_;     // block-table row length: one full context
  CudaStream stream_;  // declared before the buffers and handles below: destroyed after them

  CudaWeights weights_;

  size_t workspace_bytes_ = 0, kv_pool_bytes_ = 0;
  size_t matmul_ws_bytes_ = 0, attention_scratch_bytes_ = 0, sample_scratch_bytes_ = 0;
  DeviceBuffer x_, xn_, q32_, k32_, v32_, q16_, att_, act_, xg_, xgn_, logits_;
  DeviceBuffer matmul_ws_, attention_scratch_, sample_scratch_;
  DeviceBuffer k_pool_, v_pool_;
  MetaLayout layout_{};
  DeviceBuffer meta_;
  PinnedBuffer host_meta_;
  CudaEvent meta_copied_;  // the pinned metadata may be rewritten once this has passed

  // Sampling: per-row parameters, seen tokens (repetition penalty), results.
  DeviceBuffer sample_params_, sample_offsets_, sample_seen_, sample_tokens_, sample_logprobs_;
  PinnedBuffer host_sample_, host_seen_, host_results_;
  size_t seen_capacity_ = 0;  // tokens sample_seen_ and host_seen_ hold

  TilingTable tiles_{};  // Auto everywhere unless tuned

  // batch_invariant: false only: cuBLASLt and the 16-bit gate/up outputs SwiGLU then combines.
  std::unique_ptr<kernels::Gemm> gemm_;
  DeviceBuffer gate16_, up16_;

  // Decode graphs by (sequences, key-length bound).
  std::map<std::pair<int, int>, CudaGraphExec> graphs_;
  std::map<std::pair<int, int>, int> eager_runs_;  // a bucket runs eagerly once before capture

  // The last forward: entry -> row of logits_ (-1: none), and rows copied to the host.
  std::vector<int> entry_row_;
  std::vector<std::vector<float>> host_logits_;
};

}  // namespace hearth
