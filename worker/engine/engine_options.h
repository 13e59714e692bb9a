// How a worker's engine is built: the backend, its context, its KV pool and batch limits, and
// the kernel choices. They belong to the worker, not to a request; those that change numerics
// are here so a proof run can show them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hearth {

// The options with a fixed set of values, as enums. Each enum's names sit beside it, in the
// enum's order; a profile reads them with parse_option and writes them with option_name, and
// nothing else converts, so a value past the profile is always one the engine knows.
enum class BackendKind { Auto, Cpu, Cuda };  // auto: cuda when a GPU is present
constexpr std::array<std::string_view, 3> option_names(BackendKind) {
  return {"auto", "cpu", "cuda"};
}
enum class CudaEngineKind { Batched, Single };
constexpr std::array<std::string_view, 2> option_names(CudaEngineKind) {
  return {"batched", "single"};
}
// auto: the weights' 16-bit type (fp32 on the cpu backend). fp8_e4m3: each token's keys and
// values per KV head as e4m3 codes with one fp32 scale of their own (kv_fp8.h).
enum class KvCacheDtype { Auto, Bf16, F16, Fp8E4m3 };
constexpr std::array<std::string_view, 4> option_names(KvCacheDtype) {
  return {"auto", "bf16", "f16", "fp8_e4m3"};
}
enum class WeightsLayout { PerTensor, Packed };
constexpr std::array<std::string_view, 2> option_names(WeightsLayout) {
  return {"per-tensor", "packed"};
}
enum class DecodeGemv { Hearth, Cublas };
constexpr std::array<std::string_view, 2> option_names(DecodeGemv) {
  return {"hearth", "cublas"};
}
enum class MatmulTiling { Auto, Tuned };
constexpr std::array<std::string_view, 2> option_names(MatmulTiling) {
  return {"auto", "tuned"};
}

template <typename E>
constexpr std::string_view option_name(E value) {
  return option_names(E{})[size_t(value)];
}

// The value named `text`, or nullopt when it names none.
template <typename E>
constexpr std::optional<E> parse_option(std::string_view text) {
  const auto names = option_names(E{});
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == text) return E(i);
  return std::nullopt;
}

// "auto, cpu, cuda": the names, for an error message.
template <typename E>
std::string option_choices() {
  std::string out;
  for (std::string_view name : option_names(E{})) out.append(out.empty() ? "" : ", ").append(name);
  return out;
}

struct EngineOptions {
  BackendKind backend = BackendKind::Auto;
  int context_length = 0;  // 0: the model's maximum, capped at 4096

  // The paged KV pool: blocks of kv_block_size positions. Its size is kv_pool_tokens positions,
  // kv_pool_gb of memory, or (cuda only) kv_pool_fraction of the GPU memory left free once the
  // engine's other buffers are allocated; at most one of them set. None set: on the CPU enough
  // for max_running full contexts, capped at 1 GiB but never less than one full context; on
  // the GPU 0.9 of the free memory, at most max_running full contexts.
  int kv_block_size = 16;
  int64_t kv_pool_tokens = 0;
  double kv_pool_gb = 0;
  double kv_pool_fraction = 0;

  // Continuous batching: tokens per forward pass over all sequences (decodes plus prompt
  // chunks), and sequences running at once (fewer where the backend supports fewer).
  int max_batch_tokens = 2048;
  int max_running = 256;
  // Tokens a step may hold once it carries decodes (0: max_batch_tokens): prompt chunks beside
  // decodes are cut to it, so inter-token latency stays near a decode step's when prompts
  // arrive; decodes are never cut by it, and a step of prompts alone still takes
  // max_batch_tokens. 512 from hearth-bench --serve-bench --mixed on an H100 (8B, 64 streams:
  // ITL p99 61 -> 25 ms at the same tok/s). Chunking changes no token.
  int decode_step_tokens = 512;

  // Prefix caching: full KV blocks stay findable by a hash of everything before them, so
  // requests that share a prompt prefix compute it once (kv_cache_manager.h). It changes no
  // token; off means no lookups and no registration. Engines whose KV does not live in the
  // paged pool (cuda_engine "single") never cache.
  bool prefix_cache = true;
  // Prefix KV shared across workers (issue 22 item 3): with prefix caching on and a KV pool
  // leased from hearth-server (served mode), full blocks are published to workers of the same
  // cache domain and a local miss looks for blocks they computed. Changes no token (the
  // kernels are batch-invariant: a block's bits do not depend on who computed it). A
  // single-process engine has no one to share with: the option does nothing there.
  bool kv_share = true;

  // CUDA engine options. cuda_engine: "batched" runs many sequences per step over the paged
  // pool (batch-invariant kernels); "single" is the one-sequence engine with its own contiguous
  // cache (cuBLASLt prefill, fused GEMV decode).
  CudaEngineKind cuda_engine = CudaEngineKind::Batched;
  bool cuda_graphs = true;
  KvCacheDtype kv_cache_dtype = KvCacheDtype::Auto;
  WeightsLayout weights_layout = WeightsLayout::PerTensor;
  DecodeGemv decode_gemv = DecodeGemv::Hearth;
  // Batched engine: batch_matmul's tiling per matrix and band of row counts, "auto" (chosen by
  // shape) or "tuned" (timed on the device at start-up, ~1 s on 8B). Every tiling gives the
  // same bits; this is speed only.
  MatmulTiling matmul_tiling = MatmulTiling::Auto;
  // Batched engine: false runs the projections through cuBLASLt (gate and up as two GEMMs,
  // then SwiGLU) instead of batch_matmul: faster, above all for prompt chunks and large decode
  // batches, but cuBLASLt picks its kernel by M, so a row's bits depend on how many rows share
  // its step and a request's tokens on what else runs. For comparison only: off by default.
  bool batch_invariant = true;
  // Tensor parallelism (issue 26): ranks that each hold a piece of every tensor
  // (weight-server/model/shard_plan.h), their partial sums added in rank order. The cpu backend
  // runs them in process; the cuda backend refuses more than 1 (not built yet). It changes
  // numerics (TP=2 is not TP=1), so it is part of the cache domain.
  int tensor_parallel = 1;
  // With tensor_parallel N > 1 on the cpu backend: rank 0 in this process and one follower
  // process per other rank (worker/tp/), each holding its rank's pieces and KV heads only, the
  // partial sums exchanged through shared memory in rank order. It moves no bit (the same sums
  // in the same order as the in-process ranks), so it is not part of the cache domain.
  bool tensor_parallel_processes = false;
};

}  // namespace hearth
