// Paged attention for a mixed step on Hopper's warpgroup MMA (sm_90a), batch invariant.
//
// The rows, tiles, splits and merges of paged_attention.cu's mma.sync kernel, on wgmma: a block
// takes an item of up to 128 (query, head) rows of one sequence and kv head. Warpgroups 0 and 1
// each own 64 rows; a producer warpgroup after them copies each 64-key tile of K and V through the
// block table into a ring of shared-memory stages, 128-byte swizzled as wgmma descriptors read
// it, each stage completing a `full` mbarrier: a tile whose keys all exist by TMA, a box of one
// pool block's rows per column half (when the host could describe the pool to TMA), the tile at
// the sequence's end by cp.async, zero-filled past it. The consumers take the tiles in pairs: S = Q
// K^T of 128 keys is one m64n128k16 per k-step (Q from registers, loaded once an item; K from
// shared memory), then each tile of the pair in turn gets the online softmax in registers and
// O += P V (m64nDk16, P straight from the S registers, V read N-major by imm-trans-b), and its
// stage goes back on its `empty` mbarrier. The
// consumers follow FlashAttention-3's schedule (see the consumer loop): P V runs under the next
// softmax, and the two warpgroups take turns issuing S.
//
// Why the bits are those of a row alone: a thread of a warpgroup holds the same rows and keys of
// S and O as the thread of the same lane and warp in the mma.sync kernel (the wgmma accumulator
// layout is four m16n8 layouts stacked), so the softmax below is that kernel's code line for
// line, on the same values, with the same rounding intrinsics. Each warpgroup walks the tiles
// up to its own last row's position, exactly as a 64-row item of the mma.sync kernel; tiles past
// it (for the other warpgroup) are waited for and handed back untouched. Rows past the item's
// end see no keys and are never stored. S of a pair comes from one n128 wgmma where the
// mma.sync kernel runs two tiles of n8 MMAs: each score is still one dot product summed in
// k-steps of 16 in order, and the tensor core sums a column alike whatever N
// (`PagedAttention.WgmmaEqualsMmaSyncBitForBit` holds it to that, memcmp).
#include <cuda.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda_check.h"
#include "kernels/device_scope.h"
#include "kernels/per_device_once.h"
#include "kernels/half_utils.cuh"
#include "kernels/mma.cuh"
#include "kernels/paged_attention_split.cuh"
#include "kernels/pdl.cuh"
#include "kernels/tma_pipeline.cuh"
#include "kernels/tma_tensor_map.h"
#include "kernels/wgmma.cuh"
#include "kernels/wgmma_rs.cuh"

namespace hearth::kernels::paged {

namespace {

constexpr int kConsumers = kWgmmaItemRows / 64;
// The producer is a warpgroup after the consumers: setmaxnreg moves registers between whole
// warpgroups, and each of the SM's four register files holds one warp of each (40 + 2 x 232 of
// its 512 registers a lane): the consumers hold S of 128 keys, O and P.
constexpr int kProducerThreads = 128;
static_assert(kProducerThreads == 2 * kKeys, "the producer copies a tile with two threads a key");
constexpr int kThreads = 128 * kConsumers + kProducerThreads;
constexpr int kStages = 4;

// The kernel's parameters: the shared ones and, when `tma`, the K and V pools of the layer as
// [rows, D] matrices (row = block * rows_per_block + kv head * block_size + offset), read in
// boxes of 64 columns x block_size rows. Grid constants: TMA takes the maps' addresses.
struct WgmmaParams {
  CUtensorMap k_map, v_map;
  Params base;
  int tma;             // whole tiles by TMA
  int rows_per_block;  // block_stride / D
};

template <int D>
struct Layout {
  static constexpr int kHalfBytes = 64 * 128;             // 64 rows of one 64-column half
  static constexpr int kQBytes = kWgmmaItemRows * D * 2;  // [128 rows x D]
  static constexpr int kTileBytes = kKeys * D * 2;        // a stage's K or V: [64 keys x D]
  // K: column half h of stage s at kKOffset + (h * kStages + s) * kHalfBytes, so that in each
  // column half the keys of stages 2i and 2i + 1 are 128 contiguous rows (one n128 operand).
  static constexpr int kKOffset = kQBytes;
  static constexpr int kKHalfStride = kStages * kHalfBytes;
  // V: stage s at kVOffset + s * kTileBytes, its column halves kHalfBytes apart.
  static constexpr int kVOffset = kKOffset + kStages * kTileBytes;
  static constexpr int kStateBytes = 64 * D * 4;  // a warpgroup's merged O (fp32)
  static constexpr int kStateOffset = kVOffset + kStages * kTileBytes;
  static constexpr int kBarrierOffset = kStateOffset + kConsumers * kStateBytes;
  static constexpr size_t kSmemBytes = kBarrierOffset + 2 * 8 * kStages + 1024;
  static_assert(kSmemBytes <= 227 * 1024);
  static_assert(kStages % 2 == 0 && kTilesPerSplit % 2 == 0, "pairs of stages, pairs of tiles");
};

// Byte offset of 16-byte chunk c (of D / 8) of row r in a [rows x D] tile kept as D / 64 column
// halves of rows x 128 bytes each, chunks XORed with r % 8: the 128-byte swizzle of wgmma.
__device__ __forceinline__ uint32_t tile_offset(int rows, int r, int c) {
  return uint32_t((c / 8) * rows * 128 + r * 128 + ((c % 8) ^ (r % 8)) * 16);
}

// Shared-memory matrix descriptor, 128-byte swizzle, 8-row groups 1024 bytes apart. lbo_field:
// 1 for K-major operands (unused there); for N-major V, the distance between 64-column halves.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo_field) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(lbo_field) << 16) |
         (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// The barrier counts one arrival when all of this thread's earlier cp.asyncs have landed.
__device__ __forceinline__ void mbar_arrive_on_copies(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar))
               : "memory");
}
// Hides tma_pipeline.cuh's wait: here the spin stays inside the asm, since a C++ loop on a
// per-thread flag would look divergent to ptxas, which then serialises the wgmmas after it.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\nwait_%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra wait_%=;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
// Shared memory written by cp.async (generic proxy) becomes visible to wgmma (async proxy).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// The compiler may not move reads or writes of these registers across this point (the wgmmas
// that read or write them run asynchronously, unknown to it).
template <int N>
__device__ __forceinline__ void fence_registers(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_registers(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

// Named barriers over the two consumer warpgroups (256 threads): ids 1 and 2 are their Q loads,
// 3 + w is warpgroup w's turn to issue wgmmas (FlashAttention-3's ping-pong schedule).
constexpr int kTurnBarrier = 3;
__device__ __forceinline__ void wait_turn(int w) {
  asm volatile("bar.sync %0, 256;" ::"r"(kTurnBarrier + w) : "memory");
}
__device__ __forceinline__ void pass_turn(int w) {
  asm volatile("bar.arrive %0, 256;" ::"r"(kTurnBarrier + (w ^ 1)) : "memory");
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    attention_kernel(const __grid_constant__ WgmmaParams wp) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Layout<D>;
  constexpr int kChunks = D / 8;   // 16-byte chunks per row
  constexpr int kDSteps = D / 16;  // k-steps of S = QK^T
  constexpr int kDTiles = D / 8;   // 8-column groups of O
  extern __shared__ uint8_t smem_raw[];
  // 1024-byte aligned (the swizzle's atom) by an offset from smem_raw, so that the compiler
  // still knows every pointer below is shared memory (LDS / STS, not generic LD / ST).
  uint8_t* base = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  uint8_t* q_smem = base;
  uint8_t* k_smem = base + L::kKOffset;
  uint8_t* v_smem = base + L::kVOffset;
  uint64_t* full = reinterpret_cast<uint64_t*>(base + L::kBarrierOffset);
  uint64_t* empty = full + kStages;
  const Params& p = wp.base;
  const PagedAttentionArgs& a = p.a;
  allow_dependents_early();
  wait_for_producer();  // the plan, q and this step's pool rows
  if (int(blockIdx.x) >= p.header[0]) return;
  const int4 item = p.items[blockIdx.x];
  const int s = item.x, r0 = item.y, split = item.z, kvh = blockIdx.y;
  const int q_first = a.query_start[s], n = a.query_start[s + 1] - q_first;
  const int pos0 = a.first_pos[s], kv_len = pos0 + n, rows = n * p.group;
  const int rows_here = min(kWgmmaItemRows, rows - r0);
  const int consumers = (rows_here + 63) / 64;
  const int t_begin = split >= 0 ? split * kTilesPerSplit : 0;
  // The tiles a 64-row item of the mma.sync kernel ending at local row `last` walks.
  auto tiles_end = [&](int last) {
    const int last_pos = pos0 + (r0 + last) / p.group;
    return split >= 0 ? min(t_begin + kTilesPerSplit, last_pos / kKeys + 1) : last_pos / kKeys + 1;
  };
  const int t_end = tiles_end(rows_here - 1);
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&full[i], kProducerThreads);
      mbar_init(&empty[i], consumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  // The warpgroup index through a shuffle: ptxas then knows it is uniform across the warpgroup
  // (branches on it do not serialise the wgmmas).
  const int wg = __shfl_sync(~0u, int(threadIdx.x / 128), 0), t = threadIdx.x % 128;

  if (wg == kConsumers) {
    // ---- Producer: K and V tiles through the block table ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    const T* kp = static_cast<const T*>(a.k_pool);
    const T* vp = static_cast<const T*>(a.v_pool);
    const int* table = a.block_table + int64_t(s) * a.max_blocks;
    for (int tile = t_begin, it = 0; tile < t_end; ++tile, ++it) {
      const int stage = it % kStages;
      mbar_wait(&empty[stage], ((it / kStages) & 1) ^ 1);
      uint8_t* ks = k_smem + stage * L::kHalfBytes;
      uint8_t* vs = v_smem + stage * L::kTileBytes;
      if (wp.tma && (tile + 1) * kKeys <= kv_len) {
        // Every key exists: one box per pool block and column half, issued by one thread a
        // block after thread 0 has announced the tile's bytes; every thread arrives once.
        if (t == 0)
          mbar_expect_tx(&full[stage], 2 * L::kTileBytes);
        else
          mbar_arrive(&full[stage]);
        __syncwarp();
        if (t < kKeys / a.block_size) {
          const int first = t * a.block_size;
          const int y =
              table[(tile * kKeys + first) / a.block_size] * wp.rows_per_block + kvh * a.block_size;
#pragma unroll
          for (int h = 0; h < D / 64; ++h) {
            tma_load(ks + h * L::kKHalfStride + first * 128, &wp.k_map, h * 64, y, &full[stage]);
            tma_load(vs + h * L::kHalfBytes + first * 128, &wp.v_map, h * 64, y, &full[stage]);
          }
        }
        continue;
      }
      // Two threads per key, one table look-up and one address each; at each step the pair
      // copies two adjacent 16-byte chunks (one 32-byte sector) of K and of V.
      const int row = t / 2, key = tile * kKeys + row, side = t % 2;
      const bool ok = key < kv_len;  // past the end: zeros, so that 0 * V is 0
      int64_t at = 0;
      if (ok) {
        const int block = table[key / a.block_size];
        at = int64_t(block) * a.block_stride +
             (int64_t(kvh) * a.block_size + key % a.block_size) * D + side * 8;
      }
#pragma unroll
      for (int c = 0; c < kChunks / 2; ++c) {
        const int chunk = 2 * c + side;
        const uint32_t off = tile_offset(kKeys, row, chunk);
        // K's column halves are kKHalfStride apart (see Layout), V's kHalfBytes as in `off`.
        cp_async16(ks + off + (chunk / 8) * (L::kKHalfStride - L::kHalfBytes), kp + at + c * 16,
                   ok);
        cp_async16(vs + off, vp + at + c * 16, ok);
      }
      mbar_arrive_on_copies(&full[stage]);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    return;
  }

  // ---- Consumers: warpgroup w owns local rows [64 w, 64 w + 64) of the item ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int w = wg;
  if (w >= consumers) return;
  const int warp = t / 32, lane = t % 32, row0 = 64 * w;
  const int t_mine = tiles_end(min(row0 + 63, rows_here - 1));
  {
    // Q rows: row i is (token r / group, head kvh * group + r % group) with r = r0 + i.
    const T* qg = static_cast<const T*>(a.q);
    for (int i = t; i < 64 * kChunks; i += 128) {
      const int row = row0 + i / kChunks, c = i % kChunks, r = r0 + row;
      const bool ok = row < rows_here;
      const T* src =
          qg + int64_t(q_first + r / p.group) * p.q_dim + (kvh * p.group + r % p.group) * D + c * 8;
      cp_async16(q_smem + tile_offset(kWgmmaItemRows, row, c), ok ? src : qg, ok);
    }
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();
    asm volatile("bar.sync %0, 128;" ::"r"(w + 1) : "memory");
  }
  // The merged O of earlier splits, in shared memory (registers hold S, P and this split's O).
  float* state = reinterpret_cast<float*>(base + L::kStateOffset + w * L::kStateBytes) +
                 warp * (D / 2) * 32 + lane;

  // This thread's two rows (a: lane / 4, b: lane / 4 + 8 of its warp's 16) and their positions.
  const int row_a = row0 + warp * 16 + lane / 4, row_b = row_a + 8;
  const int pos_a = row_a < rows_here ? pos0 + (r0 + row_a) / p.group : -1;
  const int pos_b = row_b < rows_here ? pos0 + (r0 + row_b) / p.group : -1;
  const float scale_log2 = __fmul_rn(a.scale, 1.4426950408889634f);

  // Q in registers for every S of the item, as the A fragments of its k-steps (each warp's 16
  // rows, the m16n8k16 A layout): S's wgmmas then read only K from shared memory, which the
  // other warpgroup's wgmmas and the producer's copies share.
  uint32_t qf[kDSteps][4];
#pragma unroll
  for (int kk = 0; kk < kDSteps; ++kk)
    ldmatrix_x4(qf[kk], q_smem + tile_offset(kWgmmaItemRows, row0 + warp * 16 + lane % 16,
                                             2 * kk + lane / 16));
  fence_registers(qf);
  float sc[64] = {};       // S of 128 keys: sc[4 j + e] is the mma.sync kernel's sc[j][e] of
                           // the first 64 (j < 8), then of the next 64 (j - 8)
  float o[D / 2];          // this split's O: o[4 d + e] is its o[d][e]
  uint32_t pf[4][4] = {};  // P of the 64 keys whose O += P V is next to be issued (A fragments)
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;  // this split's
  float sm_a = 0.0f, sm_b = 0.0f, sl_a = 0.0f, sl_b = 0.0f;        // merged state's m and l
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;

  // O += P V from pf and the V tile of stage `st`: all D columns per wgmma (V N-major, its
  // column halves kHalfBytes apart), 16 keys per k-step. The caller fences before, commits after.
  auto issue_pv = [&](int st) {
    const uint32_t v_addr = smem_addr(v_smem + st * L::kTileBytes);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      WgmmaRs<T, D, true>::run(o, pf[kk], smem_desc(v_addr + kk * 16 * 128, L::kHalfBytes >> 4), 1);
  };
  auto release = [&](int st) {
    if (t == 0) mbar_arrive(&empty[st]);
  };
  // The online softmax of one 64-key tile `tile` (x: its 32 scores), exactly the mma.sync
  // kernel's: causal mask (a row sees keys <= its position), log2 units, running max, the
  // rescale factors of what came before, P in place, the running sums. kWhole: every row of
  // this warp sees every key of the tile, so no mask and, a key being seen, no row's maximum is
  // -inf (the same values, fewer instructions; rows past the item's end are never stored).
  auto softmax = [&](auto whole, float* x, int tile, float& alpha_a, float& alpha_b) {
    constexpr bool kWhole = decltype(whole)::value;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = tile * kKeys + j * 8 + 2 * (lane & 3) + (e & 1);
        x[4 * j + e] = kWhole || key <= (e < 2 ? pos_a : pos_b)
                           ? __fmul_rn(x[4 * j + e], scale_log2)
                           : -INFINITY;
      }
    // The row maxima as a tree, not a chain: a maximum is exact in any order (up to the sign
    // of a zero maximum, which only ever enters exp2 of a difference).
    float tree_a[8], tree_b[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      tree_a[j] = fmaxf(x[4 * j], x[4 * j + 1]);
      tree_b[j] = fmaxf(x[4 * j + 2], x[4 * j + 3]);
    }
#pragma unroll
    for (int width = 4; width >= 1; width /= 2)
#pragma unroll
      for (int j = 0; j < width; ++j) {
        tree_a[j] = fmaxf(tree_a[j], tree_a[j + width]);
        tree_b[j] = fmaxf(tree_b[j], tree_b[j + width]);
      }
    float max_a = tree_a[0], max_b = tree_b[0];
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      max_a = fmaxf(max_a, __shfl_xor_sync(~0u, max_a, off));
      max_b = fmaxf(max_b, __shfl_xor_sync(~0u, max_b, off));
    }
    const float new_a = fmaxf(m_a, max_a), new_b = fmaxf(m_b, max_b);
    // A row with nothing visible yet keeps m = -inf; its factors must stay finite.
    alpha_a = !kWhole && new_a == -INFINITY ? 1.0f : exp2f(__fsub_rn(m_a, new_a));
    alpha_b = !kWhole && new_b == -INFINITY ? 1.0f : exp2f(__fsub_rn(m_b, new_b));
    m_a = new_a;
    m_b = new_b;
    const bool none_a = !kWhole && m_a == -INFINITY, none_b = !kWhole && m_b == -INFINITY;
    float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float* y = x + 4 * j;
      y[0] = none_a ? 0.0f : exp2f(__fsub_rn(y[0], m_a));
      y[1] = none_a ? 0.0f : exp2f(__fsub_rn(y[1], m_a));
      y[2] = none_b ? 0.0f : exp2f(__fsub_rn(y[2], m_b));
      y[3] = none_b ? 0.0f : exp2f(__fsub_rn(y[3], m_b));
      sum_a = __fadd_rn(sum_a, __fadd_rn(y[0], y[1]));
      sum_b = __fadd_rn(sum_b, __fadd_rn(y[2], y[3]));
    }
    l_a = __fmaf_rn(l_a, alpha_a, sum_a);
    l_b = __fmaf_rn(l_b, alpha_b, sum_b);
  };
  // Tiles up to this warp's first row's position are whole for every row of the warp.
  const int warp_first_pos =
      __reduce_min_sync(~0u, min(pos_a < 0 ? INT_MAX : pos_a, pos_b < 0 ? INT_MAX : pos_b));
  auto softmax_tile = [&](float* x, int tile, float& alpha_a, float& alpha_b) {
    if (tile * kKeys + kKeys - 1 <= warp_first_pos)
      softmax(std::true_type{}, x, tile, alpha_a, alpha_b);
    else
      softmax(std::false_type{}, x, tile, alpha_a, alpha_b);
  };
  // Once the last P V has landed: o takes the new tile's alpha and pf its P (x). P's
  // accumulators are already the A fragments of O += P V (16 keys per k-step); packed before
  // any wgmma fence: registers written between wgmmas would make ptxas wait.
  auto rescale_and_pack = [&](const float* x, float alpha_a, float alpha_b) {
    // x 1.0 is exact, so a warp none of whose rows found a new maximum (most tiles past a
    // split's first few) skips the rescale.
    if (__any_sync(~0u, alpha_a != 1.0f || alpha_b != 1.0f)) {
#pragma unroll
      for (int d = 0; d < kDTiles; ++d) {
        o[4 * d + 0] = __fmul_rn(o[4 * d + 0], alpha_a);
        o[4 * d + 1] = __fmul_rn(o[4 * d + 1], alpha_a);
        o[4 * d + 2] = __fmul_rn(o[4 * d + 2], alpha_b);
        o[4 * d + 3] = __fmul_rn(o[4 * d + 3], alpha_b);
      }
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      pf[kk][0] = pack_half2<T>(x[8 * kk + 0], x[8 * kk + 1]);
      pf[kk][1] = pack_half2<T>(x[8 * kk + 2], x[8 * kk + 3]);
      pf[kk][2] = pack_half2<T>(x[8 * kk + 4], x[8 * kk + 5]);
      pf[kk][3] = pack_half2<T>(x[8 * kk + 6], x[8 * kk + 7]);
    }
    fence_registers(pf);
    fence_registers(o);
  };
  // The end of split tile / kTilesPerSplit (its last P V landed): finish its sums over the quad,
  // then merge it into the state (in order) or publish it as a partial; the next split starts
  // afresh.
  auto end_split = [&](int tile) {
    const int j = tile / kTilesPerSplit;
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
        const int col = d * 8 + 2 * (lane & 3);
        if (sees_a) *reinterpret_cast<float2*>(pa + col) = make_float2(o[4 * d], o[4 * d + 1]);
        if (sees_b) *reinterpret_cast<float2*>(pb + col) = make_float2(o[4 * d + 2], o[4 * d + 3]);
      }
      if ((lane & 3) == 0) {
        if (sees_a) pa[D] = m_a, pa[D + 1] = l_a;
        if (sees_b) pb[D] = m_b, pb[D + 1] = l_b;
      }
    } else {
      float ma, aa, ba, mb, ab, bb;
      merge_factors(sm_a, m_a, ma, aa, ba);
      merge_factors(sm_b, m_b, mb, ab, bb);
      if (j == 0) {
#pragma unroll
        for (int i = 0; i < D / 2; ++i) state[i * 32] = o[i];
      } else {
        // Selects, not branches: a row that does not see split j keeps its state.
#pragma unroll
        for (int i = 0; i < D / 2; ++i) {
          const bool first_row = (i & 3) < 2;
          const float st = state[i * 32];
          const float merged =
              first_row ? merge_value(st, aa, o[i], ba) : merge_value(st, ab, o[i], bb);
          state[i * 32] = (first_row ? sees_a : sees_b) ? merged : st;
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
    for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
  };

  // The walk takes the 64-key tiles in pairs (splits hold whole pairs): S = Q K^T of a pair is
  // one n128 wgmma per k-step (each score is the same dot product in the same k order as an n64
  // wgmma's), then each tile of the pair goes through the online softmax and O += P V in turn,
  // so every value still sees the mma.sync kernel's operations in its order. The schedule
  // (FlashAttention-3's) only moves when independent work is issued:
  // - a pair's second P V is issued with the next pair's S and runs under its first softmax; the
  //   first P V runs under the second softmax. o is rescaled by a tile's alpha once the P V
  //   before has landed. At a split's end the P V is issued and waited for at once (the merge
  //   needs it), so nothing crosses a split.
  // - with two consumer warpgroups, they take turns issuing S (named barriers), so one's
  //   softmax runs while the other's wgmmas hold the tensor cores. Both walk every pair to
  //   t_end and take one turn per pair, skipped pairs included, so the turns pair up;
  //   warpgroup 1 hands warpgroup 0 the first turn and keeps its last one.
  const bool ping_pong = consumers == 2;
  if (ping_pong && w == 1 && t_begin < t_end) pass_turn(w);
  bool pv_pending = false;  // pf and pv_stage hold the previous pair's second P V
  int pv_stage = 0;

  for (int tile = t_begin, it = 0; tile < t_end; tile += 2, it += 2) {
    const int stage = it % kStages;  // the pair's tiles are in stages `stage` and `stage + 1`
    const bool has_second = tile + 1 < t_end;
    const bool pass_after = ping_pong && !(w == 1 && tile + 2 >= t_end);
    const uint32_t parity = (it / kStages) & 1;
    mbar_wait(&full[stage], parity);
    if (has_second) mbar_wait(&full[stage + 1], parity);
    if (tile >= t_mine) {  // only the other warpgroup's rows see this pair
      // No P V is pending: the pair before t_mine ended this warpgroup's last split.
      if (ping_pong) wait_turn(w);
      if (pass_after) pass_turn(w);
      release(stage);
      if (has_second) release(stage + 1);
      continue;
    }
    const bool second_mine = tile + 1 < t_mine;
    fence_proxy_async();
    // S = Q K^T of 128 keys: k-steps of 16 along the head dim, in order. Without a second tile
    // its half of S reads a stage no copy is writing and is not used.
    // The first k-step overwrites S (scale-d 0) instead of adding to zeros: the same sums.
    const uint32_t k_addr = smem_addr(k_smem + stage * L::kHalfBytes);
    if (ping_pong) wait_turn(w);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kDSteps; ++kk)
      WgmmaRs<T, 128, false>::run(
          sc, qf[kk], smem_desc(k_addr + (kk / 4) * L::kKHalfStride + (kk % 4) * 32, 1), kk > 0);
    wgmma_commit();
    if (pv_pending) issue_pv(pv_stage);
    wgmma_commit();  // an empty group when nothing was pending: the waits below stay fixed
    if (pass_after) pass_turn(w);
    wgmma_wait<1>();  // S has landed; the P V may still run
    fence_registers(sc);

    float alpha_a, alpha_b;
    softmax_tile(sc, tile, alpha_a, alpha_b);
    wgmma_wait<0>();  // the previous pair's second P V
    fence_registers(o);
    fence_registers(pf);
    if (pv_pending) release(pv_stage);
    pv_pending = false;
    rescale_and_pack(sc, alpha_a, alpha_b);
    wgmma_fence();
    issue_pv(stage);
    wgmma_commit();
    int last_stage = stage;  // of the split's last P V, when the split ends in this pair
    if (second_mine) {
      softmax_tile(sc + 32, tile + 1, alpha_a, alpha_b);  // under the first tile's P V
      wgmma_wait<0>();
      fence_registers(o);
      fence_registers(pf);
      release(stage);
      rescale_and_pack(sc + 32, alpha_a, alpha_b);
      if ((tile + 2) % kTilesPerSplit != 0 && tile + 2 != t_mine) {
        pv_pending = true;  // issued with the next pair's S
        pv_stage = stage + 1;
        continue;
      }
      wgmma_fence();
      issue_pv(stage + 1);
      wgmma_commit();
      last_stage = stage + 1;
    }
    // The split's last P V (the merge needs it), then the split's end. One call site: the
    // merge inlined twice costs registers.
    wgmma_wait<0>();
    fence_registers(o);
    release(last_stage);
    if (!second_mine && has_second) release(stage + 1);  // the other warpgroup's tile
    end_split(tile);
  }

  if (split < 0) {
    T* out = static_cast<T*>(a.out);
    auto row_out = [&](int row) {
      const int r = r0 + row;
      return out + int64_t(q_first + r / p.group) * p.q_dim + (kvh * p.group + r % p.group) * D;
    };
#pragma unroll
    for (int d = 0; d < kDTiles; ++d) {
      const int col = d * 8 + 2 * (lane & 3);
      if (row_a < rows_here)
        *reinterpret_cast<uint32_t*>(row_out(row_a) + col) = pack_half2<T>(
            __fdiv_rn(state[(4 * d) * 32], sl_a), __fdiv_rn(state[(4 * d + 1) * 32], sl_a));
      if (row_b < rows_here)
        *reinterpret_cast<uint32_t*>(row_out(row_b) + col) = pack_half2<T>(
            __fdiv_rn(state[(4 * d + 2) * 32], sl_b), __fdiv_rn(state[(4 * d + 3) * 32], sl_b));
    }
  }
#else
  (void)wp;
  __trap();
#endif
}

// The rows of a pool as TMA sees them: [rows, head_dim], row = block x rows_per_block + kv head x
// block_size + offset; rows 0 when TMA cannot describe it (paged_attention_tma_tiles). The
// args' block_stride is the one the kernels step by (params_for set it).
struct PoolRows {
  int64_t rows = 0, rows_per_block = 0;
};
PoolRows pool_rows(const PagedAttentionArgs& a) {
  const int bs = a.block_size, d = a.head_dim;
  const bool shape_fits = (d == 64 || d == 128) && !a.fp8_kv && a.n_kv_heads > 0;
  const bool block_fits = bs >= 8 && bs <= kKeys && kKeys % bs == 0;
  const bool aligned = reinterpret_cast<uintptr_t>(a.k_pool) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(a.v_pool) % 16 == 0 && a.block_stride > 0 &&
                       a.block_stride % d == 0;
  if (a.pool_blocks <= 0 || !shape_fits || !block_fits || !aligned) return {};
  const int64_t per_block = a.block_stride / d;
  const int64_t rows = (a.pool_blocks - 1) * per_block + int64_t(a.n_kv_heads) * bs;
  if (per_block < int64_t(a.n_kv_heads) * bs || rows > INT32_MAX) return {};
  return {rows, per_block};
}

// Whole tiles by TMA where paged_attention_tma_tiles says so; the maps box one pool block's rows
// of a 64-column half (the swizzle's 8-row groups stay whole).
template <int D>
WgmmaParams params_with_maps(const Params& p, CUtensorMapDataType type) {
  WgmmaParams wp{};
  wp.base = p;
  const PagedAttentionArgs& a = p.a;
  const PoolRows r = pool_rows(a);
  if (r.rows == 0) return wp;
  wp.k_map = swizzled_k_major_map(type, 2, a.k_pool, int(r.rows), D, D, 64, a.block_size,
                                  "paged_attention");
  wp.v_map = swizzled_k_major_map(type, 2, a.v_pool, int(r.rows), D, D, 64, a.block_size,
                                  "paged_attention");
  wp.tma = 1;
  wp.rows_per_block = int(r.rows_per_block);
  return wp;
}

template <typename T, int D>
void launch(const Params& p, int grid, cudaStream_t stream) {
  auto kernel = attention_kernel<T, D>;
  static PerDeviceOnce configured;  // per device: tensor-parallel ranks, any host thread
  configured.run(current_device(), [&] {
    HEARTH_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(Layout<D>::kSmemBytes)));
  });
  const WgmmaParams wp =
      params_with_maps<D>(p, std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                       : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
  launch_pdl(kernel, dim3(grid, p.a.n_kv_heads), dim3(kThreads), Layout<D>::kSmemBytes, stream, wp);
}

}  // namespace

bool wgmma_available() {
  static const bool ok = [] {
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
      return false;
    if (major != 9 || minor != 0) return false;
    cudaFuncAttributes attr{};
    return cudaFuncGetAttributes(&attr, attention_kernel<__nv_bfloat16, 128>) == cudaSuccess &&
           attr.binaryVersion == 90;
  }();
  return ok;
}

bool tma_tiles(const PagedAttentionArgs& a) {
  return pool_rows(a).rows > 0;
}

void launch_wgmma(Half type, const Params& p, int grid, cudaStream_t stream) {
  HEARTH_DISPATCH_HALF(type, T, {
    if (p.a.head_dim == 128)
      launch<T, 128>(p, grid, stream);
    else if (p.a.head_dim == 64)
      launch<T, 64>(p, grid, stream);
    else
      throw std::invalid_argument(
          "paged_attention: the wgmma kernel takes head_dim 64 or 128, not " +
          std::to_string(p.a.head_dim));
  });
}

}  // namespace hearth::kernels::paged
