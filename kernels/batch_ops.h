// The CUDA kernels of continuous batching: one step holds T tokens of S sequences (decodes and
// prompt chunks mixed), their K/V live in a paged pool, and any number of rows is sampled.
//
// Every kernel here is batch invariant: a row's result is bit-identical whatever else is in the
// step (how many rows, its position among them, how a prompt was chunked, which physical blocks
// hold its cache). That holds by construction, not by luck:
//   - matmul: one fp32 accumulator per output, fed by tensor-core steps over K in one fixed
//     order; on Hopper (wgmma_matmul.h) one m64nNk16 chain over all of K, elsewhere m16n8k16
//     steps in K slices whose number depends on the weight's shape alone
//     (batch_matmul_k_slices), never on M; tile shapes change with M, the arithmetic does not;
//   - attention: keys are cut into splits of kAttentionSplitTokens at absolute positions; each
//     split runs an online softmax over 64-key tiles aligned the same way, and splits are merged
//     strictly in order with one merge function, whether the merge happens inside a block or in
//     a separate pass;
//   - sampling: one block per row, with fixed-order reductions.
// Elementwise arithmetic is written with explicit rounding intrinsics where the compiler could
// otherwise fuse differently in different instantiations.
//
// All launchers are asynchronous on `stream`, check their arguments (std::invalid_argument with
// what and where) and the launch. CPU references: kernels/reference.h.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "kernels/ops.h"
#include "kernels/sampling_rules.h"

namespace hearth::kernels {

// ---- Row-invariant matmul ------------------------------------------------------------------
// out[m, n] = sum_k A[m, k] * W[n, k]  (+ bias[n]), fp32 accumulation, for any M >= 1.
//   StoreF32:      out fp32 [m, n]
//   StoreHalf:     out 16-bit [m, n]
//   AccumulateF32: out fp32 [m, n] += result          (o_proj / down_proj into the residual)
//   SwiGLU:        out 16-bit [m, n] = silu(A.Wg) * (A.Wu), w = Wg, w_up = Wu  (no bias)
enum class MatmulEpilogue { StoreF32, StoreHalf, AccumulateF32, SwiGLU };

// Tilings. Auto picks by M and N; the others exist so tests and benchmarks can show that every
// tiling gives the same bits. Skinny streams the weights with many blocks (16/32/64 rows x 32
// weight rows, K slices spread over blocks): decode steps. Medium (64 x 128) and Large
// (128 x 256) are pipelined tensor-core tiles for prompt chunks.
enum class MatmulTiles { Auto, Skinny, Medium, Large };

// A further weight multiplied by the same activations in the same call (k and v after q): its
// own [n, k] weight, optional bias [n] and [m, n] output. Column j of a segment gets exactly the
// arithmetic of a call on that weight alone (its own tiles, the same K order), so the same bits.
struct MatmulSegment {
  const void* w = nullptr;
  const float* bias = nullptr;
  void* out = nullptr;
  int n = 0;
};

struct MatmulArgs {
  const void* a = nullptr;      // activations [m, k], 16-bit, rows `lda` elements apart
  int64_t lda = 0;              // 0: k
  const void* w = nullptr;      // weight [n, k], 16-bit, row-major (the HF layout)
  const void* w_up = nullptr;   // SwiGLU only: the up weight [n, k]
  const float* bias = nullptr;  // optional [n]
  int m = 0, n = 0, k = 0;      // k: a multiple of 16
  // Rows of `a` (`lda` apart) that may be read, >= m; 0: m. See a_map_rows.
  int a_rows_readable = 0;
  void* out = nullptr;  // [m, n], contiguous
  // Scratch for K slices spread over blocks: batch_matmul_workspace_bytes(m, n, k, tiles)
  // bytes (enough for every M' <= m); zeroed once when allocated (the kernel leaves its
  // counters zeroed). One workspace per stream. May be null when that size is 0.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  MatmulTiles tiles = MatmulTiles::Auto;
  // Weights after w (whose segment is w, bias, n, out), in order, while their w is set; not
  // with SwiGLU. The wgmma kernel runs them all in one launch; mma.sync one call each.
  std::array<MatmulSegment, 2> more{};
};
// The rows the wgmma kernels' A descriptor spans: m rounded up to whole tiles of `tile_rows`
// where `readable` rows (0: m) allow. A box reaching past the descriptor's last row is zero-
// filled by TMA, and streams slower when it reaches more than ~16 rows past it (H100, 8B at 65
// rows: q/k/v 30.2 us zero-filled, 24.1 reading the rows; down 76.8 and 66.5; level at 1-64
// and 128); rows read past m only feed outputs past m, which are never stored, so the bits of
// rows below m do not change.
int a_map_rows(int m, int readable, int tile_rows);
// Both wgmma kernels' check of it: throws std::invalid_argument prefixed by `kernel` unless
// `readable` is 0 or at least m.
void check_a_rows_readable(const char* kernel, int readable, int m);

// The segments of a call, w's first: how many are set (1 to 3) into `out`.
int matmul_segments(const MatmulArgs& args, std::array<MatmulSegment, 3>& out);

// The checks both matmul kernels make before launching: shapes, alignment, the SwiGLU pair.
// Throws std::invalid_argument naming `kernel`; returns the row stride of `a` (lda, 0 → k).
int64_t checked_matmul_lda(const char* kernel, MatmulEpilogue epilogue, const MatmulArgs& args);

// How many consecutive K slices an output is summed from (1, 2, 4 or 8): a function of the
// weight's shape only. Each slice is an ascending chain of k16 tensor-core steps started from
// zero; the output is ((s0 + s1) + s2) + ... in slice order.
int batch_matmul_k_slices(int n, int k);
// On a compute-capability 9.0 GPU batch_matmul runs the wgmma kernel (kernels/wgmma_matmul.h:
// its own K slices, wgmma_matmul_k_slices, and its own bits); elsewhere the mma.sync kernel
// below. The workspace is either's (swiglu: n is the gate's columns, as SwiGLU calls pass it).
size_t batch_matmul_workspace_bytes(int m, int n, int k, MatmulTiles tiles = MatmulTiles::Auto,
                                    bool swiglu = false);
void batch_matmul(Half type, MatmulEpilogue epilogue, const MatmulArgs& args, cudaStream_t stream);
// The mma.sync kernel on any GPU (benchmarks, and the fallback off Hopper).
size_t batch_matmul_mma_workspace_bytes(int m, int n, int k, MatmulTiles tiles = MatmulTiles::Auto);
void batch_matmul_mma(Half type, MatmulEpilogue epilogue, const MatmulArgs& args,
                      cudaStream_t stream);

// ---- K/V write into the paged pool, with RoPE ------------------------------------------------
// The batched counterpart of qkv_rope: per token t, bias, optional per-head RMSNorm (Qwen3),
// RoPE at position pos[t]; q out as 16-bit; k and v stored at slot[t] = block * block_size +
// offset of the layer's pools: block b of a layer starts block_stride values past block b - 1
// and holds [n_kv_heads][block_size][head_dim]. A token with slot < 0 (padding) writes its q
// row only.
struct PagedKvWriteArgs {
  const float* q = nullptr;  // [t, n_heads * head_dim]
  const float* k = nullptr;  // [t, n_kv_heads * head_dim]
  const float* v = nullptr;
  const float* bq = nullptr;  // optional biases
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* q_norm = nullptr;  // optional [head_dim] weights
  const float* k_norm = nullptr;
  const float* inv_freq = nullptr;  // [head_dim / 2]
  const int* pos = nullptr;         // [t] device
  const int* slot = nullptr;        // [t] device
  int num_tokens = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, block_size = 0;
  float eps = 1e-6f;
  void* q_out = nullptr;   // [t, n_heads * head_dim] 16-bit
  void* k_pool = nullptr;  // this layer's block 0, 16-bit
  void* v_pool = nullptr;
  // 16-bit values from one block of the layer to the next; 0 means packed blocks
  // (n_kv_heads * block_size * head_dim). A block-major pool interleaves every layer's keys and
  // values in one block, so that a block is one unit of memory (a leased chunk holds whole
  // blocks). A multiple of 8 (16-byte rows).
  int64_t block_stride = 0;
  // fp8 KV (kv_cache_dtype fp8_e4m3): the pools hold one e4m3 code per value (strides count
  // codes, i.e. bytes), and each (kv head, offset) row's fp32 scale sits kv_scale_offset bytes
  // past its block's codes, at [n_kv_heads][block_size]. A row's scale is its largest magnitude
  // / 448 (1 when all are zero) and its codes encode_e4m3(x / scale): the CPU engine's rule
  // (worker/engine/kv_fp8.h), so a row's codes depend on that row alone.
  bool fp8_kv = false;
  int64_t kv_scale_offset = 0;
};
void paged_kv_write(Half type, const PagedKvWriteArgs& args, cudaStream_t stream);

// ---- Paged attention for a mixed step ------------------------------------------------------
// T query tokens of S sequences: sequence s owns tokens query_start[s] .. query_start[s+1]-1,
// at positions first_pos[s] + i; its keys and values (positions 0 .. first_pos[s] + n_s - 1,
// this step's included) are in the pools at block_table[s][pos / block_size], offset
// pos % block_size. Causal: a query at position p sees keys 0..p. GQA: query head h reads
// kv head h / (n_heads / n_kv_heads). head_dim 64 or 128 (also 16, 32).
//
// Keys are cut into splits of kAttentionSplitTokens at absolute positions. A block serves up to
// 64 (query, head) rows of one sequence and one kv head. A sequence whose rows fit one block
// (a decode, a short chunk) may have its splits computed by separate blocks and merged in a
// second pass; otherwise one block walks the splits in order. Both give the same bits.
constexpr int kAttentionSplitTokens = 512;

// Which kernel runs paged attention (the same for a step's plan and its layers). Auto: wgmma
// on a compute-capability 9.0 device for head_dim 64 and 128 when the step has a prompt chunk,
// mma.sync otherwise (kernels/notes/paged_attention.md). Each gives a row the same bits in every
// step composition, and the two give the same bits as each other (the tensor cores sum each
// 16-wide k-step alike; tests/kernels/batch_kernels_test.cc checks it), so choosing per step
// keeps that guarantee.
// MmaSync runs steps of decodes alone on its decode instantiation (three blocks an SM, the same
// bits); MmaSyncGeneral keeps them on the general one (for tests and benchmarks to compare).
enum class PagedAttentionKernel { Auto, MmaSync, Wgmma, MmaSyncGeneral };

struct PagedAttentionArgs {
  const void* q = nullptr;       // [num_tokens, n_heads * head_dim] 16-bit
  const void* k_pool = nullptr;  // block 0 of the layer: [n_kv_heads][block_size][head_dim] 16-bit
  const void* v_pool = nullptr;
  int64_t block_stride = 0;          // as in PagedKvWriteArgs: 0 means packed blocks
  const int* query_start = nullptr;  // [num_seqs + 1] device
  const int* first_pos = nullptr;    // [num_seqs] device
  const int* block_table = nullptr;  // [num_seqs][max_blocks] device
  int num_seqs = 0, num_tokens = 0, max_blocks = 0, block_size = 0;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  // A bound on first_pos[s] + n_s over the step, known to the host (sizes the grid only).
  int max_kv_len = 0;
  // Blocks addressable from the pools (every id a block table may hold is below it: own and
  // foreign blocks, the whole reservation of a leased pool). With it the wgmma kernel reads
  // whole K/V tiles by TMA within those bounds; 0 (unknown) keeps it on cp.async.
  int64_t pool_blocks = 0;
  float scale = 1.0f;
  // Splits of one-block sequences spread over blocks (faster for few, long sequences). The
  // result is the same either way; off is for tests.
  bool split_kv = true;
  PagedAttentionKernel kernel = PagedAttentionKernel::Auto;  // the same for plan and layers
  // fp8 KV, as in PagedKvWriteArgs: keys and values read as code x scale in fp32, rounded to
  // the 16-bit type of q before the tensor cores see them. Runs on the mma.sync kernel (Auto
  // picks it; Wgmma is refused).
  bool fp8_kv = false;
  int64_t kv_scale_offset = 0;
  void* scratch = nullptr;  // paged_attention_scratch_bytes(...) bytes
  size_t scratch_bytes = 0;
  void* out = nullptr;  // [num_tokens, n_heads * head_dim] 16-bit
};
// Scratch for steps of at most max_tokens tokens, max_seqs sequences and max_kv_len positions,
// with room for the split partials of `split_tokens` query tokens (decodes); tokens beyond that
// room are served by blocks that walk all splits themselves.
size_t paged_attention_scratch_bytes(int max_tokens, int max_seqs, int max_kv_len, int n_heads,
                                     int head_dim, int split_tokens);
// Once per step (after query_start / first_pos are on the device, before the layers): lays out
// the work of the step in the scratch. Every layer's paged_attention then reuses it.
void paged_attention_plan(const PagedAttentionArgs& args, cudaStream_t stream);
void paged_attention(Half type, const PagedAttentionArgs& args, cudaStream_t stream);
// Whether the wgmma kernel reads the whole K/V tiles of these args by TMA (the tile at a
// sequence's end always by cp.async): the pools' extent known (pool_blocks), blocks of 8 to 64
// keys dividing 64, 16-byte aligned pools whose block stride is whole rows, rows addressable by
// 32-bit coordinates, 16-bit KV of head_dim 64 or 128. The launch follows the same rule.
bool paged_attention_tma_tiles(const PagedAttentionArgs& args);

// ---- Batched sampling ------------------------------------------------------------------------
// Row r of logits [rows, vocab] is sampled with params[r] under the host sampler's rules
// (worker/engine/sampler.h, kernels/sampling_rules.h): the row's token edits (logit_bias,
// repetition / frequency / presence penalties), then greedy (temperature <= 0 or top_k == 1:
// the highest adjusted logit, lowest id among equals) or temperature, top-k, top-p, min-p and
// the Gumbel-max pick of (seed, step). tokens[r] and logprobs[r] (the raw log-softmax) are
// written, and with top_logprobs > 0 the row's most likely raw tokens. Rows never share work,
// so a row's result does not depend on the others.
struct SampleRowParams {
  uint64_t seed = 0, step = 0;
  float temperature = 1.0f;  // <= 0: greedy
  float top_p = 1.0f, min_p = 0.0f, penalty = 1.0f;
  int top_k = 0;
  float frequency = 0.0f, presence = 0.0f;
  int top_logprobs = 0;  // 0 .. kMaxSampleTopLogprobs
};
inline constexpr int kMaxSampleTopLogprobs = 20;
struct BatchSampleArgs {
  const float* logits = nullptr;  // [rows, vocab]
  int rows = 0, vocab = 0;
  const SampleRowParams* params = nullptr;  // [rows] device
  // Optional: row r's token edits are edits[edit_offsets[r] .. edit_offsets[r+1]), ids ascending
  // and unique (hearth::token_edits builds them).
  const int* edit_offsets = nullptr;
  const sampling_rules::TokenEdit* edits = nullptr;
  int32_t* tokens = nullptr;  // [rows]
  float* logprobs = nullptr;  // [rows]
  // Optional, [rows][kMaxSampleTopLogprobs]: row r's first top_logprobs entries are its most
  // likely tokens by raw logit (larger first, lower id among equals) and their log-softmax.
  int32_t* top_tokens = nullptr;
  float* top_logprobs = nullptr;
};
// All rows in one launch, a block each, with no scratch: top-k and top-p are selections, not
// sorts.
void batch_sample(const BatchSampleArgs& args, cudaStream_t stream);

// out[r, :] = in[idx[r], :] for r < rows: the hidden rows whose logits a step needs.
void gather_rows(const float* in, const int32_t* idx, int rows, int hidden, float* out,
                 cudaStream_t stream);

}  // namespace hearth::kernels
