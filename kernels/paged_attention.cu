// Paged attention for a mixed step (decodes and prompt chunks together), batch invariant.
//
// A block takes up to 64 (query, head) rows of one sequence that share a kv head (tokens x the
// GQA group) and walks the keys in 64-key tiles read through the block table: S = QK^T and
// O += PV on m16n8k16 tensor cores, an online softmax per row. The keys are cut into splits of
// kAttentionSplitTokens at absolute positions; within a split the tiles are aligned the same
// way, and a row's state restarts at each split. Splits are then merged strictly in order with
// merge_split(): inside the block (a long chunk walks all its splits), or by a second kernel
// when the splits of a one-block sequence (a decode) ran in separate blocks for parallelism.
//
// Why a row's bits do not depend on the step: every value a row computes depends only on its
// own query, its own keys and the fixed tile/split grid. Other rows of a block add tiles that
// are fully masked for this row; such a tile leaves the row's state exactly as it was
// (alpha = 1, p = 0, and V past the sequence's end is zero-filled so 0 * V stays 0), and whole
// splits beyond the row's position are not merged at all. All softmax arithmetic uses explicit
// rounding intrinsics, so the block kernel and the merge kernel compute merges identically.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/batch_ops.h"
#include "kernels/cuda_check.h"
#include "kernels/fp8_e4m3.h"
#include "kernels/half_utils.cuh"
#include "kernels/head_dim_dispatch.h"
#include "kernels/mma.cuh"
#include "kernels/device_scope.h"
#include "kernels/per_device_once.h"
#include "kernels/paged_attention_split.cuh"
#include "kernels/pdl.cuh"

namespace hearth::kernels {

namespace {

using paged::kKeys;
using paged::kSplit;
using paged::kTilesPerSplit;
using paged::merge_factors;
using paged::merge_value;
using paged::Params;

constexpr int kRows = 64;  // (query, head) rows per block
constexpr int kWarps = 4;

// Scratch: a header, the work items, the merge list, then split partials.
struct Layout {
  int max_items = 0, j_max = 0;
  size_t items = 0, merges = 0, partials = 0;
};

size_t round_up(size_t v, size_t to) {
  return (v + to - 1) / to * to;
}

Layout layout_for(int tokens, int seqs, int max_kv_len) {
  Layout l;
  l.j_max = (max_kv_len + kSplit - 1) / kSplit;
  // In-block items: at most ceil(rows / 64) per sequence <= tokens + seqs (a group is at most
  // 64 heads); split items: at most j_max per sequence.
  l.max_items = tokens + seqs + seqs * l.j_max;
  l.items = 256;
  l.merges = l.items + round_up(size_t(l.max_items) * sizeof(int4), 256);
  l.partials = l.merges + round_up(size_t(seqs) * sizeof(int2), 256);
  return l;
}

// ---- Plan: one block lays out the step's work ----

struct PlanParams {
  const int* query_start;
  const int* first_pos;
  int num_seqs, group, n_heads, j_max;
  int item_rows;  // rows of an item walked by one block: 64 (mma.sync), 16 (its decode
                  // blocks) or 128 (wgmma)
  bool split_kv;
  long long capacity;  // partial entries that fit
  int* header;
  int4* items;
  int2* merges;
};

// Exclusive prefix sum over the block in thread order; `total` gets the sum of all.
template <typename V>
__device__ V block_exclusive_scan(V v, V* warp_sums, V& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  V x = v;
  for (int o = 1; o < 32; o <<= 1) {
    const V y = __shfl_up_sync(~0u, x, o);
    if (lane >= o) x += y;
  }
  __syncthreads();  // warp_sums may still be read by a previous scan
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    V w = lane < warps ? warp_sums[lane] : V(0);
    for (int o = 1; o < 32; o <<= 1) {
      const V y = __shfl_up_sync(~0u, w, o);
      if (lane >= o) w += y;
    }
    warp_sums[lane] = w;
  }
  __syncthreads();
  total = warp_sums[warps - 1];
  return (warp == 0 ? V(0) : warp_sums[warp - 1]) + x - v;
}

constexpr int kPlanThreads = 1024;

__global__ void __launch_bounds__(kPlanThreads) plan_kernel(PlanParams p) {
  __shared__ long long sums64[32];
  __shared__ int sums32[32];
  allow_dependents_early();
  wait_for_producer();
  const int per = (p.num_seqs + kPlanThreads - 1) / kPlanThreads;
  const int lo = min(p.num_seqs, int(threadIdx.x) * per), hi = min(p.num_seqs, lo + per);
  struct Seq {
    int n, splits;
    long long entries;  // partial entries if its splits run in separate blocks, else 0
  };
  auto seq = [&](int s) {
    Seq q;
    q.n = p.query_start[s + 1] - p.query_start[s];
    q.splits = q.n > 0 ? (p.first_pos[s] + q.n - 1) / kSplit + 1 : 0;
    // A spread split's block takes all of the sequence's rows: at most one item's worth.
    const bool spread = p.split_kv && q.n > 0 &&
                        q.n * p.group <= min(paged::kSpreadRows, p.item_rows) && q.splits > 1 &&
                        q.splits <= p.j_max;
    q.entries = spread ? (long long)q.n * p.n_heads * q.splits : 0;
    return q;
  };
  // Sequences whose entries, counted from the first, still fit spread their splits.
  long long mine = 0;
  for (int s = lo; s < hi; ++s) mine += seq(s).entries;
  long long all_entries;
  const long long entry_base = block_exclusive_scan(mine, sums64, all_entries);
  int items = 0, merges = 0;
  {
    long long run = entry_base;
    for (int s = lo; s < hi; ++s) {
      const Seq q = seq(s);
      run += q.entries;
      if (q.entries && run <= p.capacity) {
        items += q.splits;
        ++merges;
      } else {
        items += (q.n * p.group + p.item_rows - 1) / p.item_rows;
      }
    }
  }
  int all_items, all_merges;
  int item = block_exclusive_scan(items, sums32, all_items);
  int merge = block_exclusive_scan(merges, sums32, all_merges);
  long long run = entry_base;
  for (int s = lo; s < hi; ++s) {
    const Seq q = seq(s);
    const int base = int(run);
    run += q.entries;
    if (q.entries && run <= p.capacity) {
      for (int j = 0; j < q.splits; ++j) p.items[item++] = make_int4(s, 0, j, base);
      p.merges[merge++] = make_int2(s, base);
    } else {
      // Heaviest (latest) rows first: they walk the most keys.
      for (int b = (q.n * p.group + p.item_rows - 1) / p.item_rows - 1; b >= 0; --b)
        p.items[item++] = make_int4(s, b * p.item_rows, -1, 0);
    }
  }
  if (threadIdx.x == 0) {
    p.header[0] = all_items;
    p.header[1] = all_merges;
  }
}

// ---- The attention kernel ----

template <typename T, int D>
struct Smem {
  T q[kRows * D];
  T k[2][kKeys * D];
  T v[2][kKeys * D];
  float state[kWarps][D / 2][32];  // merged o of each thread's fragments
};

// A block of at most 16 rows (a decode: one token x its GQA group) fills one warp's MMA rows.
// Rather than leave three warps idle, the four cooperate on each tile: warp w computes the
// scores of keys [16w, 16w + 16) (n-tiles 2w, 2w + 1, which are also P's k-step w), their
// softmax terms, and output column pairs [w, w + 1) x kPairsPerWarp. The row maxima (exact in
// any order), each row's pair sums and P's fragments go through shared memory, and every warp
// adds a row's pair sums in the one-warp order, j = 0..7. So each value is computed by the same
// instructions in the same order as by one warp alone and a row's bits do not change
// (PagedAttention tests: a decode == its row of a prompt chunk, memcmp). Decode blocks are
// bound by one warp's chain of dependent instructions per tile; this shortens it about 4x.
constexpr bool cooperative_head_dim(int d) {
  return (d / 16) % kWarps == 0;  // column pairs split evenly over warps
}
template <int D>
constexpr bool kCooperativeD = cooperative_head_dim(D);
// What cooperating warps exchange per tile: in state[1..] of the general layout (only
// state[0] is used then), in its own array of the decode layout.
struct CooperativeExchange {
  float* max;    // [kWarps][16 rows]
  float* pairs;  // [16 rows][8 n-tiles][4 quad columns]
  uint32_t* p;   // [4 k-steps][32 lanes][4]
};
constexpr size_t kExchangeFloats = kWarps * 16 + 16 * 8 * 4 + 4 * 32 * 4;
__device__ __forceinline__ CooperativeExchange exchange_at(float* base) {
  return {base, base + kWarps * 16, reinterpret_cast<uint32_t*>(base + kWarps * 16 + 16 * 8 * 4)};
}
template <typename T, int D>
__device__ __forceinline__ CooperativeExchange cooperative_exchange(Smem<T, D>& sm) {
  static_assert(!kCooperativeD<D> ||
                kExchangeFloats * 4 <= sizeof(sm.state) / kWarps * (kWarps - 1));
  return exchange_at(&sm.state[1][0][0]);
}

// A decode launch (kDecode below): every item is at most 16 rows (one token x its GQA group,
// or 16 rows of a longer one), so a block holds q for 16 rows, its two K/V stages and the
// cooperative exchange; the merged state of its splits stays in registers. 72 KB at head_dim
// 128 against 112: three blocks an SM instead of two (ncu on a 256-stream decode step: two
// blocks of four warps left the schedulers idle 68% of cycles).
constexpr int kDecodeRows = 16;
template <typename T, int D>
struct DecodeSmem {
  T q[kDecodeRows * D];
  T k[2][kKeys * D];
  T v[2][kKeys * D];
  float exchange[kExchangeFloats];
};
template <typename T, int D>
__device__ __forceinline__ CooperativeExchange cooperative_exchange(DecodeSmem<T, D>& sm) {
  return exchange_at(sm.exchange);
}

// fp8 KV: 8 codes of one row times the row's scale, in fp32, rounded to T: what the tensor
// cores read in place of a 16-bit row's 16 bytes.
template <typename T>
__device__ __forceinline__ uint4 dequantize8(uint2 codes, float scale) {
  uint4 out;
  T* v = reinterpret_cast<T*>(&out);
  const uint8_t* c = reinterpret_cast<const uint8_t*>(&codes);
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = HalfTraits<T>::from_float(__fmul_rn(decode_e4m3(c[j]), scale));
  return out;
}

// F8: the pools hold fp8 codes and scales (PagedAttentionArgs::fp8_kv); tiles are read with
// plain loads, dequantized and stored to shared memory, instead of cp.async copies.
// kDecode: items of at most 16 rows (the plan's item_rows), every block cooperative, the
// DecodeSmem layout, three blocks an SM; the same instructions in the same order per value as
// the general kernel's cooperative blocks, so the same bits.
template <typename T, int D, bool F8, bool kDecode = false>
__global__ void __launch_bounds__(kWarps * 32, kDecode ? 3 : 2) paged_attention_kernel(Params p) {
  static_assert(!kDecode || (kCooperativeD<D> && !F8));
  constexpr int kChunks = D / 8;   // 16-byte chunks per row
  constexpr int kDSteps = D / 16;  // k-steps of S = QK^T
  constexpr int kDTiles = D / 8;   // n-tiles of O
  constexpr int kItemRows = kDecode ? kDecodeRows : kRows;
  using Shared = std::conditional_t<kDecode, DecodeSmem<T, D>, Smem<T, D>>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Shared& sm = *reinterpret_cast<Shared*>(smem_raw);
  const PagedAttentionArgs& a = p.a;
  allow_dependents_early();
  wait_for_producer();  // the plan, q and this step's pool rows
  if (int(blockIdx.x) >= p.header[0]) return;
  const int4 item = p.items[blockIdx.x];
  const int s = item.x, r0 = item.y, split = item.z, kvh = blockIdx.y;
  const int q_first = a.query_start[s], n = a.query_start[s + 1] - q_first;
  const int pos0 = a.first_pos[s], kv_len = pos0 + n, rows = n * p.group;
  const int rows_here = min(kItemRows, rows - r0);
  const int last_pos = pos0 + (r0 + rows_here - 1) / p.group;
  const int t_begin = split >= 0 ? split * kTilesPerSplit : 0;
  const int t_end =
      split >= 0 ? min(t_begin + kTilesPerSplit, last_pos / kKeys + 1) : last_pos / kKeys + 1;
  const int* table = a.block_table + int64_t(s) * a.max_blocks;
  const T* qg = static_cast<const T*>(a.q);

  // Q rows: row i is (token r / group, head kvh * group + r % group) with r = r0 + i.
  for (int i = threadIdx.x; i < kItemRows * kChunks; i += kWarps * 32) {
    const int row = i / kChunks, c = i % kChunks, r = r0 + row;
    const bool ok = row < rows_here;
    const T* src =
        qg + int64_t(q_first + r / p.group) * p.q_dim + (kvh * p.group + r % p.group) * D + c * 8;
    cp_async16(sm.q + swizzle<D>(row, c), ok ? src : qg, ok);
  }
  // fp8: a tile's codes are fetched into registers (this thread's kPer 8-code chunks of K and
  // V) and stored, dequantized by their rows' scales, to shared memory later, so the next
  // tile's loads are in flight while this one is computed (what cp.async gives the 16-bit
  // pools). The scales are read at the store: holding them too spills at head_dim 128.
  constexpr int kPer = kKeys * kChunks / (kWarps * 32);
  static_assert(kKeys * kChunks % (kWarps * 32) == 0);
  uint2 k_codes[F8 ? kPer : 1], v_codes[F8 ? kPer : 1];
  // Byte offset of key `key`'s row (kv head kvh) in the pools, from block 0 of the layer.
  auto row_at = [&](int key) {
    return int64_t(table[key / a.block_size]) * a.block_stride +
           (int64_t(kvh) * a.block_size + key % a.block_size) * D;
  };
  auto fetch = [&](int t) {
    const uint8_t* kp = static_cast<const uint8_t*>(a.k_pool);
    const uint8_t* vp = static_cast<const uint8_t*>(a.v_pool);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = threadIdx.x + j * kWarps * 32;
      const int c = i % kChunks, key = t * kKeys + i / kChunks;
      k_codes[j] = v_codes[j] = make_uint2(0, 0);
      if (key < kv_len) {
        const int64_t at = row_at(key) + c * 8;
        k_codes[j] = *reinterpret_cast<const uint2*>(kp + at);
        v_codes[j] = *reinterpret_cast<const uint2*>(vp + at);
      }
    }
  };
  auto store = [&](int buf, int t) {
    const uint8_t* kp = static_cast<const uint8_t*>(a.k_pool);
    const uint8_t* vp = static_cast<const uint8_t*>(a.v_pool);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = threadIdx.x + j * kWarps * 32;
      const int row = i / kChunks, c = i % kChunks, key = t * kKeys + row;
      // Past the end: code 0 x scale 0, +0 in T, the bits cp.async's zero fill gives.
      float k_scale = 0.0f, v_scale = 0.0f;
      if (key < kv_len) {
        const int64_t block = int64_t(table[key / a.block_size]) * a.block_stride;
        const int64_t s_at =
            block + a.kv_scale_offset + (int64_t(kvh) * a.block_size + key % a.block_size) * 4;
        k_scale = *reinterpret_cast<const float*>(kp + s_at);
        v_scale = *reinterpret_cast<const float*>(vp + s_at);
      }
      *reinterpret_cast<uint4*>(sm.k[buf] + swizzle<D>(row, c)) =
          dequantize8<T>(k_codes[j], k_scale);
      *reinterpret_cast<uint4*>(sm.v[buf] + swizzle<D>(row, c)) =
          dequantize8<T>(v_codes[j], v_scale);
    }
  };
  // This thread's share of a 16-bit tile's copies: 16-byte chunk load_chunk of rows load_row0,
  // load_row0 + kLoadRowStep, ...; a power-of-two block size (every pool hearth makes) turns the
  // block-table index into a shift. The per-tile address work is what a decode block waits on.
  constexpr int kLoadRowStep = kWarps * 32 / kChunks;
  static_assert(kWarps * 32 % kChunks == 0 && kKeys % kLoadRowStep == 0);
  const int load_chunk = int(threadIdx.x) % kChunks, load_row0 = int(threadIdx.x) / kChunks;
  const int block_shift = (a.block_size & (a.block_size - 1)) == 0 ? __ffs(a.block_size) - 1 : -1;
  const int64_t load_head_offset = int64_t(kvh) * a.block_size * D + load_chunk * 8;
  auto load_tile = [&](int buf, int t) {
    if constexpr (F8) {
      fetch(t);
      store(buf, t);
      return;
    }
    const T* kp = static_cast<const T*>(a.k_pool);
    const T* vp = static_cast<const T*>(a.v_pool);
#pragma unroll
    for (int row = load_row0; row < kKeys; row += kLoadRowStep) {
      const int key = t * kKeys + row;
      const bool ok = key < kv_len;  // past the end: zeros, so that 0 * V is 0
      int64_t at = 0;
      if (ok) {
        const int index = block_shift >= 0 ? key >> block_shift : key / a.block_size;
        at = int64_t(table[index]) * a.block_stride + load_head_offset +
             int64_t(key - index * a.block_size) * D;
      }
      cp_async16(sm.k[buf] + swizzle<D>(row, load_chunk), kp + at, ok);
      cp_async16(sm.v[buf] + swizzle<D>(row, load_chunk), vp + at, ok);
    }
  };
  load_tile(0, t_begin);
  cp_async_commit();

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // The same for the whole block; a compile-time true for decode blocks.
  const bool cooperative = kDecode || (kCooperativeD<D> && rows_here <= 16);
  const bool active = cooperative || warp * 16 < rows_here;
  const int row_warp = cooperative ? 0 : warp;  // the 16 rows this warp computes
  // This warp's share of a tile: score n-tile pairs [np0, np0 + np_count) and output column
  // pairs [dp0, dp0 + dp_count); registers sc[0..] and o[0..] hold them (constant indexes, so
  // they stay registers), addresses add the runtime base.
  constexpr int kPairsPerWarp = kCooperativeD<D> ? kDTiles / 2 / kWarps : 1;
  const int np0 = cooperative ? warp : 0, np_count = cooperative ? 1 : 4;
  const int dp0 = cooperative ? warp * kPairsPerWarp : 0;
  const int dp_count = cooperative ? kPairsPerWarp : kDTiles / 2;
  CooperativeExchange ex{};
  if (cooperative) ex = cooperative_exchange(sm);
  // This thread's two rows (a: lane / 4, b: lane / 4 + 8 of the warp's 16) and their positions.
  const int row_a = row_warp * 16 + lane / 4, row_b = row_a + 8;
  const int pos_a = row_a < rows_here ? pos0 + (r0 + row_a) / p.group : -1;
  const int pos_b = row_b < rows_here ? pos0 + (r0 + row_b) / p.group : -1;
  const float scale_log2 = __fmul_rn(a.scale, 1.4426950408889634f);

  uint32_t qf[kDSteps][4];
  float o[kDTiles][4];
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;  // this split's
  float sm_a = 0.0f, sm_b = 0.0f, sl_a = 0.0f, sl_b = 0.0f;        // merged state's m and l
  // The merged o of earlier splits: this thread's fragments, in shared memory (registers for
  // decode blocks, whose share is 4 x kPairsPerWarp fragments).
  float state_regs[kDecode ? kDTiles : 1][4];
  auto state = [&](int d, int e) -> float& {
    if constexpr (kDecode)
      return state_regs[d][e];
    else
      return sm.state[row_warp][(2 * dp0 + d) * 4 + e][lane];
  };
#pragma unroll
  for (int t = 0; t < kDTiles; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;

  for (int t = t_begin; t < t_end; ++t) {
    const int buf = (t - t_begin) & 1;
    if (t + 1 < t_end) {
      if constexpr (F8)
        fetch(t + 1);  // stored after this tile's math
      else
        load_tile(buf ^ 1, t + 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (t == t_begin && active) {
#pragma unroll
      for (int st = 0; st < kDSteps; ++st)
        ldmatrix_x4(qf[st], sm.q + swizzle<D>(row_warp * 16 + (lane & 15), 2 * st + (lane >> 4)));
    }
    if (active) {
      const T* ks = sm.k[buf];
      const T* vs = sm.v[buf];
      // S = Q K^T: 16 rows x 64 keys, 8 n-tiles of 8 keys.
      float sc[8][4];
#pragma unroll
      for (int j = 0; j < 8; ++j) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
      for (int st = 0; st < kDSteps; ++st) {
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          if (np == np_count) break;
          uint32_t b[4];
          ldmatrix_x4(b, ks + swizzle<D>((np0 + np) * 16 + (lane & 7) + (lane >> 4) * 8,
                                         2 * st + ((lane >> 3) & 1)));
          mma_16816<T>(sc[2 * np], qf[st], b[0], b[1]);
          mma_16816<T>(sc[2 * np + 1], qf[st], b[2], b[3]);
        }
      }
      // Causal mask (a row sees keys <= its position), log2 units, running max.
      float max_a = -INFINITY, max_b = -INFINITY;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (j == 2 * np_count) break;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = t * kKeys + (2 * np0 + j) * 8 + 2 * (lane & 3) + (e & 1);
          const float v =
              key <= (e < 2 ? pos_a : pos_b) ? __fmul_rn(sc[j][e], scale_log2) : -INFINITY;
          sc[j][e] = v;
          if (e < 2)
            max_a = fmaxf(max_a, v);
          else
            max_b = fmaxf(max_b, v);
        }
      }
#pragma unroll
      for (int off = 1; off <= 2; off <<= 1) {
        max_a = fmaxf(max_a, __shfl_xor_sync(~0u, max_a, off));
        max_b = fmaxf(max_b, __shfl_xor_sync(~0u, max_b, off));
      }
      if (cooperative) {  // the row maxima over all four warps' keys
        if ((lane & 3) == 0) {
          ex.max[warp * 16 + lane / 4] = max_a;
          ex.max[warp * 16 + lane / 4 + 8] = max_b;
        }
        __syncthreads();
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
          max_a = fmaxf(max_a, ex.max[w * 16 + lane / 4]);
          max_b = fmaxf(max_b, ex.max[w * 16 + lane / 4 + 8]);
        }
      }
      const float new_a = fmaxf(m_a, max_a), new_b = fmaxf(m_b, max_b);
      // A row with nothing visible yet keeps m = -inf; its factors must stay finite.
      const float alpha_a = new_a == -INFINITY ? 1.0f : exp2f(__fsub_rn(m_a, new_a));
      const float alpha_b = new_b == -INFINITY ? 1.0f : exp2f(__fsub_rn(m_b, new_b));
      m_a = new_a;
      m_b = new_b;
      // p = 2^(s - m); a row's sum adds its n-tiles' pair sums in order, j = 0..7.
      float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (j == 2 * np_count) break;
        sc[j][0] = m_a == -INFINITY ? 0.0f : exp2f(__fsub_rn(sc[j][0], m_a));
        sc[j][1] = m_a == -INFINITY ? 0.0f : exp2f(__fsub_rn(sc[j][1], m_a));
        sc[j][2] = m_b == -INFINITY ? 0.0f : exp2f(__fsub_rn(sc[j][2], m_b));
        sc[j][3] = m_b == -INFINITY ? 0.0f : exp2f(__fsub_rn(sc[j][3], m_b));
        const float pair_a = __fadd_rn(sc[j][0], sc[j][1]);
        const float pair_b = __fadd_rn(sc[j][2], sc[j][3]);
        if (cooperative) {
          ex.pairs[((lane / 4) * 8 + 2 * np0 + j) * 4 + (lane & 3)] = pair_a;
          ex.pairs[((lane / 4 + 8) * 8 + 2 * np0 + j) * 4 + (lane & 3)] = pair_b;
        } else {
          sum_a = __fadd_rn(sum_a, pair_a);
          sum_b = __fadd_rn(sum_b, pair_b);
        }
      }
      // P as the A fragment of k-step kk of O += P V: P's accumulators are laid out as one.
      auto p_fragment = [&](int kk) {
        return make_uint4(pack_half2<T>(sc[2 * kk][0], sc[2 * kk][1]),
                          pack_half2<T>(sc[2 * kk][2], sc[2 * kk][3]),
                          pack_half2<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                          pack_half2<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3]));
      };
      if (cooperative) {  // every warp gets every warp's pair sums and P fragment
        *reinterpret_cast<uint4*>(ex.p + (np0 * 32 + lane) * 4) = p_fragment(0);
        __syncthreads();
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          sum_a = __fadd_rn(sum_a, ex.pairs[((lane / 4) * 8 + j) * 4 + (lane & 3)]);
          sum_b = __fadd_rn(sum_b, ex.pairs[((lane / 4 + 8) * 8 + j) * 4 + (lane & 3)]);
        }
      }
      l_a = __fmaf_rn(l_a, alpha_a, sum_a);
      l_b = __fmaf_rn(l_b, alpha_b, sum_b);
#pragma unroll
      for (int d = 0; d < kDTiles; ++d) {
        if (d == 2 * dp_count) break;
        o[d][0] = __fmul_rn(o[d][0], alpha_a);
        o[d][1] = __fmul_rn(o[d][1], alpha_a);
        o[d][2] = __fmul_rn(o[d][2], alpha_b);
        o[d][3] = __fmul_rn(o[d][3], alpha_b);
      }
      // O += P V: P's accumulators are already laid out as A fragments (16 keys per k-step).
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint4 f = cooperative ? *reinterpret_cast<const uint4*>(ex.p + (kk * 32 + lane) * 4)
                                    : p_fragment(kk);
        const uint32_t pf[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
        for (int dp = 0; dp < kDTiles / 2; ++dp) {
          if (dp == dp_count) break;
          uint32_t b[4];
          ldmatrix_x4_trans(b, vs + swizzle<D>(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                               2 * (dp0 + dp) + (lane >> 4)));
          mma_16816<T>(o[2 * dp], pf, b[0], b[1]);
          mma_16816<T>(o[2 * dp + 1], pf, b[2], b[3]);
        }
      }

      // End of a split: finish its sums over the quad, then merge it into the state (in
      // order) or publish it as a partial; the next split starts afresh.
      if ((t + 1) % kTilesPerSplit == 0 || t + 1 == t_end) {
        const int j = t / kTilesPerSplit;
#pragma unroll
        for (int off = 1; off <= 2; off <<= 1) {
          l_a = __fadd_rn(l_a, __shfl_xor_sync(~0u, l_a, off));
          l_b = __fadd_rn(l_b, __shfl_xor_sync(~0u, l_b, off));
        }
        const bool sees_a = pos_a >= j * kSplit, sees_b = pos_b >= j * kSplit;
        if (split >= 0) {
          const int64_t entry_a = (int64_t(j) * rows + r0 + row_a) * a.n_kv_heads + kvh + item.w;
          const int64_t entry_b = entry_a + 8 * int64_t(a.n_kv_heads);
          float* pa = p.partials + entry_a * (D + 2);
          float* pb = p.partials + entry_b * (D + 2);
#pragma unroll
          for (int d = 0; d < kDTiles; ++d) {
            if (d == 2 * dp_count) break;
            const int col = (2 * dp0 + d) * 8 + 2 * (lane & 3);
            if (sees_a) *reinterpret_cast<float2*>(pa + col) = make_float2(o[d][0], o[d][1]);
            if (sees_b) *reinterpret_cast<float2*>(pb + col) = make_float2(o[d][2], o[d][3]);
          }
          if ((lane & 3) == 0 && (!cooperative || warp == 0)) {
            if (sees_a) pa[D] = m_a, pa[D + 1] = l_a;
            if (sees_b) pb[D] = m_b, pb[D + 1] = l_b;
          }
        } else {
          float ma, aa, ba, mb, ab, bb;
          merge_factors(sm_a, m_a, ma, aa, ba);
          merge_factors(sm_b, m_b, mb, ab, bb);
#pragma unroll
          for (int d = 0; d < kDTiles; ++d) {
            if (d == 2 * dp_count) break;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              float& st = state(d, e);
              if (j == 0)
                st = o[d][e];
              else if (e < 2 ? sees_a : sees_b)
                st = e < 2 ? merge_value(st, aa, o[d][e], ba) : merge_value(st, ab, o[d][e], bb);
            }
          }
          if (j == 0) {
            sm_a = m_a, sl_a = l_a, sm_b = m_b, sl_b = l_b;
          } else {
            if (sees_a) sl_a = merge_value(sl_a, aa, l_a, ba), sm_a = ma;
            if (sees_b) sl_b = merge_value(sl_b, ab, l_b, bb), sm_b = mb;
          }
        }
        m_a = m_b = -INFINITY;
        l_a = l_b = 0.0f;
#pragma unroll
        for (int d = 0; d < kDTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
      }
    }
    if constexpr (F8) {
      if (t + 1 < t_end) store(buf ^ 1, t + 1);  // unread since last iteration's barrier
    }
    __syncthreads();  // the buffer refilled next is no longer read
  }

  if (split < 0 && active) {
    T* out = static_cast<T*>(a.out);
    auto row_out = [&](int row) {
      const int r = r0 + row;
      return out + int64_t(q_first + r / p.group) * p.q_dim + (kvh * p.group + r % p.group) * D;
    };
#pragma unroll
    for (int d = 0; d < kDTiles; ++d) {
      if (d == 2 * dp_count) break;
      const int col = (2 * dp0 + d) * 8 + 2 * (lane & 3);
      if (row_a < rows_here)
        *reinterpret_cast<uint32_t*>(row_out(row_a) + col) =
            pack_half2<T>(__fdiv_rn(state(d, 0), sl_a), __fdiv_rn(state(d, 1), sl_a));
      if (row_b < rows_here)
        *reinterpret_cast<uint32_t*>(row_out(row_b) + col) =
            pack_half2<T>(__fdiv_rn(state(d, 2), sl_b), __fdiv_rn(state(d, 3), sl_b));
    }
  }
}

// Merges the splits of sequences whose splits ran in separate blocks, in split order.
template <typename T, int D>
__global__ void __launch_bounds__(256) merge_kernel(Params p) {
  const PagedAttentionArgs& a = p.a;
  allow_dependents_early();
  wait_for_producer();
  if (int(blockIdx.x) >= p.header[1]) return;
  const int2 mg = p.merges[blockIdx.x];
  const int s = mg.x, kvh = blockIdx.y;
  const int q_first = a.query_start[s], n = a.query_start[s + 1] - q_first;
  const int pos0 = a.first_pos[s], rows = n * p.group;
  T* out = static_cast<T*>(a.out);
  for (int i = threadIdx.x; i < rows * D; i += blockDim.x) {
    const int r = i / D, d = i % D;
    const int splits = (pos0 + r / p.group) / kSplit + 1;
    auto entry = [&](int j) {
      return p.partials + ((int64_t(j) * rows + r) * a.n_kv_heads + kvh + mg.y) * (D + 2);
    };
    const float* e0 = entry(0);
    float m = e0[D], l = e0[D + 1], o = e0[d];
    for (int j = 1; j < splits; ++j) {
      const float* e = entry(j);
      float mj, fa, fb;
      merge_factors(m, e[D], mj, fa, fb);
      l = merge_value(l, fa, e[D + 1], fb);
      o = merge_value(o, fa, e[d], fb);
      m = mj;
    }
    out[int64_t(q_first + r / p.group) * p.q_dim + (kvh * p.group + r % p.group) * D + d] =
        HalfTraits<T>::from_float(__fdiv_rn(o, l));
  }
}

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("paged_attention: " + what);
}

void check(const PagedAttentionArgs& a, const Layout& l) {
  if (a.num_seqs < 1 || a.num_tokens < 1) fail("a step needs at least one sequence and token");
  if (!head_dim_supported(a.head_dim))
    fail("head_dim must be 16, 32, 64 or 128, not " + std::to_string(a.head_dim));
  if (a.n_kv_heads < 1 || a.n_heads % a.n_kv_heads != 0 || a.n_heads / a.n_kv_heads > kRows)
    fail("n_heads (" + std::to_string(a.n_heads) + ") must be a multiple of n_kv_heads (" +
         std::to_string(a.n_kv_heads) + "), at most 64 per kv head");
  if (a.block_size < 1 || a.max_blocks < 1) fail("block_size and max_blocks must be positive");
  if (a.max_kv_len < 1) fail("max_kv_len must be positive");
  const int64_t packed = int64_t(a.n_kv_heads) * a.block_size * a.head_dim;
  if (a.fp8_kv && a.kv_scale_offset != 0 &&
      (a.kv_scale_offset < packed || a.kv_scale_offset % 4 != 0 ||
       (a.block_stride != 0 && a.block_stride < a.kv_scale_offset + packed / a.head_dim * 4)))
    fail("fp8 KV: kv_scale_offset " + std::to_string(a.kv_scale_offset) +
         " must follow a block's codes (" + std::to_string(packed) +
         "), be a multiple of 4 and leave the scales inside block_stride");
  if (a.fp8_kv && (reinterpret_cast<uintptr_t>(a.k_pool) % 8 != 0 ||
                   reinterpret_cast<uintptr_t>(a.v_pool) % 8 != 0))
    fail("fp8 KV pools must be 8-byte aligned (rows are read 8 codes at a time)");
  if (a.block_stride != 0 && (a.block_stride < packed || a.block_stride % 8 != 0))
    fail("block_stride " + std::to_string(a.block_stride) + " must hold a block (" +
         std::to_string(packed) + ") and be a multiple of 8");
  if (!a.q || !a.k_pool || !a.v_pool || !a.query_start || !a.first_pos || !a.block_table ||
      !a.out || !a.scratch)
    fail("q, the pools, query_start, first_pos, block_table, scratch and out are required");
  if (a.scratch_bytes < l.partials)
    fail("scratch of " + std::to_string(a.scratch_bytes) + " bytes, at least " +
         std::to_string(l.partials) + " needed (paged_attention_scratch_bytes)");
}

// The values of one pool block, all its KV heads (fp8: its codes, their scales after them).
int64_t values_per_block(const PagedAttentionArgs& a) {
  return int64_t(a.n_kv_heads) * a.block_size * a.head_dim;
}

// The distance the kernels step from block to block: block_stride, or packed blocks when it is 0
// (fp8: a block's codes, then their scales).
int64_t block_stride_of(const PagedAttentionArgs& a) {
  const int64_t packed = values_per_block(a);
  return a.block_stride != 0 ? a.block_stride : packed + (a.fp8_kv ? packed / a.head_dim * 4 : 0);
}

Params params_for(const PagedAttentionArgs& a, const Layout& l) {
  Params p;
  p.a = a;
  // fp8: a block's scales follow its codes unless placed elsewhere (as paged_kv_write).
  if (a.fp8_kv && p.a.kv_scale_offset == 0) p.a.kv_scale_offset = values_per_block(a);
  p.a.block_stride = block_stride_of(a);
  p.group = a.n_heads / a.n_kv_heads;
  p.q_dim = a.n_heads * a.head_dim;
  char* base = static_cast<char*>(a.scratch);
  p.header = reinterpret_cast<const int*>(base);
  p.items = reinterpret_cast<const int4*>(base + l.items);
  p.merges = reinterpret_cast<const int2*>(base + l.merges);
  p.partials = reinterpret_cast<float*>(base + l.partials);
  return p;
}

// Blocks that can have work: at most ceil(tokens x group / item_rows) + seqs items of rows, plus
// at most j_max for a sequence whose splits are spread (replacing at least one item of rows).
// The rest of max_items would only start, read the plan's count and exit, each holding an SM.
int grid_items(const PagedAttentionArgs& a, const Layout& l, int item_rows) {
  const int group = a.n_heads / a.n_kv_heads;
  int64_t bound = (int64_t(a.num_tokens) * group + item_rows - 1) / item_rows + a.num_seqs;
  if (a.split_kv) bound += int64_t(a.num_seqs) * l.j_max;
  return int(std::min<int64_t>(bound, l.max_items));
}

// The kernel for these args (the plan's item size follows it).
bool use_wgmma(const PagedAttentionArgs& a) {
  if (a.kernel == PagedAttentionKernel::MmaSync || a.kernel == PagedAttentionKernel::MmaSyncGeneral)
    return false;
  // fp8 KV runs on mma.sync only: its tiles are dequantized on their way to shared memory,
  // which the wgmma kernel's TMA producer cannot do (the simpler correct path; unmeasured).
  if (a.fp8_kv) {
    if (a.kernel == PagedAttentionKernel::Wgmma) fail("fp8 KV runs on the mma.sync kernel only");
    return false;
  }
  const bool fits = a.head_dim == 64 || a.head_dim == 128;
  if (a.kernel == PagedAttentionKernel::Wgmma) {
    if (!fits) fail("the wgmma kernel takes head_dim 64 or 128, not " + std::to_string(a.head_dim));
    if (!paged::wgmma_available()) fail("the wgmma kernel needs a compute-capability 9.0 device");
    return true;
  }
  // Auto: steps of decodes alone stay on mma.sync (faster for one query per sequence, the
  // wgmma kernel's 64-row MMAs are mostly empty there); both kernels give a row the same bits
  // (PagedAttention.WgmmaEqualsMmaSyncBitForBit), so the choice per step keeps invariance.
  return fits && a.num_tokens > a.num_seqs && paged::wgmma_available();
}

// Steps of decodes alone (one query a sequence) on the mma.sync kernel take its decode
// instantiation, where a decode's cooperative four warps can run: head_dim 64 or 128, a GQA
// group of at most 16, 16-bit KV. It gives the same bits as the general kernel (the tests
// compare them), so the choice per step keeps invariance; it decides the plan's item rows.
bool use_decode_kernel(const PagedAttentionArgs& a) {
  return !use_wgmma(a) && !a.fp8_kv && a.num_tokens == a.num_seqs &&
         cooperative_head_dim(a.head_dim) && a.n_heads / a.n_kv_heads <= kDecodeRows &&
         a.kernel != PagedAttentionKernel::MmaSyncGeneral;
}

int item_rows(const PagedAttentionArgs& a) {
  return use_wgmma(a) ? paged::kWgmmaItemRows : use_decode_kernel(a) ? kDecodeRows : kRows;
}

template <typename T, int D>
void launch(const PagedAttentionArgs& a, cudaStream_t stream) {
  const Layout l = layout_for(a.num_tokens, a.num_seqs, a.max_kv_len);
  const Params p = params_for(a, l);
  if (use_wgmma(a)) {
    paged::launch_wgmma(std::is_same_v<T, __half> ? Half::F16 : Half::BF16, p,
                        grid_items(a, l, paged::kWgmmaItemRows), stream);
    if (a.split_kv && l.j_max > 1)
      launch_pdl(merge_kernel<T, D>, dim3(a.num_seqs, a.n_kv_heads), dim3(256), 0, stream, p);
    return;
  }
  auto kernel = a.fp8_kv ? paged_attention_kernel<T, D, true> : paged_attention_kernel<T, D, false>;
  size_t smem = sizeof(Smem<T, D>);
  if constexpr (kCooperativeD<D>) {
    if (use_decode_kernel(a)) {
      kernel = paged_attention_kernel<T, D, false, true>;
      smem = sizeof(DecodeSmem<T, D>);
    }
  }
  static PerDeviceOnce configured;  // per device: tensor-parallel ranks, any host thread
  configured.run(current_device(), [&] {
    for (auto k : {paged_attention_kernel<T, D, true>, paged_attention_kernel<T, D, false>})
      HEARTH_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             int(sizeof(Smem<T, D>))));
    if constexpr (kCooperativeD<D>)
      HEARTH_CUDA_CHECK(cudaFuncSetAttribute(paged_attention_kernel<T, D, false, true>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             int(sizeof(DecodeSmem<T, D>))));
  });
  launch_pdl(kernel, dim3(grid_items(a, l, item_rows(a)), a.n_kv_heads), dim3(kWarps * 32), smem,
             stream, p);
  if (a.split_kv && l.j_max > 1)
    launch_pdl(merge_kernel<T, D>, dim3(a.num_seqs, a.n_kv_heads), dim3(256), 0, stream, p);
}

}  // namespace

size_t paged_attention_scratch_bytes(int max_tokens, int max_seqs, int max_kv_len, int n_heads,
                                     int head_dim, int split_tokens) {
  const Layout l = layout_for(max_tokens, max_seqs, max_kv_len);
  return l.partials + size_t(split_tokens) * n_heads * l.j_max * (head_dim + 2) * sizeof(float);
}

void paged_attention_plan(const PagedAttentionArgs& a, cudaStream_t stream) {
  const Layout l = layout_for(a.num_tokens, a.num_seqs, a.max_kv_len);
  check(a, l);
  PlanParams p;
  p.query_start = a.query_start;
  p.first_pos = a.first_pos;
  p.num_seqs = a.num_seqs;
  p.group = a.n_heads / a.n_kv_heads;
  p.n_heads = a.n_heads;
  p.j_max = l.j_max;
  p.split_kv = a.split_kv;
  p.item_rows = item_rows(a);
  p.capacity = (long long)((a.scratch_bytes - l.partials) / ((a.head_dim + 2) * sizeof(float)));
  char* base = static_cast<char*>(a.scratch);
  p.header = reinterpret_cast<int*>(base);
  p.items = reinterpret_cast<int4*>(base + l.items);
  p.merges = reinterpret_cast<int2*>(base + l.merges);
  launch_pdl(plan_kernel, dim3(1), dim3(kPlanThreads), 0, stream, p);
}

void paged_attention(Half type, const PagedAttentionArgs& a, cudaStream_t stream) {
  check(a, layout_for(a.num_tokens, a.num_seqs, a.max_kv_len));
  HEARTH_DISPATCH_HALF(type, T, {
    dispatch_head_dim(a.head_dim, "paged_attention",
                      [&](auto d) { launch<T, decltype(d)::value>(a, stream); });
  });
}

bool paged_attention_tma_tiles(const PagedAttentionArgs& a) {
  PagedAttentionArgs stepped = a;
  stepped.block_stride = block_stride_of(a);
  return paged::tma_tiles(stepped);
}

}  // namespace hearth::kernels
