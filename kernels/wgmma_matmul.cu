// Row-invariant matmul with wgmma and TMA (see wgmma_matmul.h for why it is invariant).
//
// One persistent kernel template: warpgroup 0 is the producer (one thread issues TMA copies of
// 64-wide K tiles of A and W into a ring of shared-memory stages, 128-byte swizzled, each
// completing on a `full` mbarrier), warpgroups 1..C are consumers (each owns 64 rows of the
// block tile, issues m64nNk16 wgmmas over a stage, and frees it on the stage's `empty` mbarrier
// once its wgmmas have read it). Blocks walk tiles grouped by 8 along M so neighbours share
// weight tiles in L2; the producer runs ahead into the next tile while consumers store (the ring,
// the tile walk and the producer loop: kernels/persistent_tiles.cuh, shared with fp8_matmul.cu).
// Compiled for sm_90a only (kernels/CMakeLists.txt); elsewhere the kernel body traps and
// wgmma_matmul_available() is false.
#include "kernels/wgmma_matmul.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/device_scope.h"
#include "kernels/per_device_once.h"
#include "kernels/device_sm_count.h"
#include "kernels/half_utils.cuh"
#include "kernels/k_slices.cuh"
#include "kernels/matmul_epilogue.cuh"
#include "kernels/matmul_tiling.h"
#include "kernels/mma.cuh"
#include "kernels/pdl.cuh"
#include "kernels/persistent_tiles.cuh"
#include "kernels/stream_matmul.h"
#include "kernels/tma_pipeline.cuh"
#include "kernels/tma_tensor_map.h"
#include "kernels/wgmma.cuh"
#include "kernels/wgmma_rs.cuh"

namespace hearth::kernels {

namespace {

constexpr int kBK = 64;  // K per stage: 128 bytes of 16-bit values, one swizzle row
constexpr int kRowBytes = kBK * 2;

constexpr int kMaxSegments = 3;  // q, k and v

// One weight of the launch and its output columns: tiles tile0 .. the next segment's tile0 - 1
// are its column tiles 0, 1, ... exactly as in a launch of this weight alone.
struct Segment {
  CUtensorMap map;  // W (SwiGLU: gate) [n, k], box {64, BN (SwiGLU, clusters: BN / 2)}
  const float* bias;
  void* out;  // [m, n]
  int n, tile0;
};

struct Params {
  CUtensorMap map_a;   // A [m, k], box {64, BM}
  CUtensorMap map_w1;  // SwiGLU: up (one segment only)
  Segment seg[kMaxSegments];
  int segments;
  int m, k;
  int tiles_m, tiles_n;         // tiles_n: over all segments
  int halves;                   // K's fixed halves (wgmma_matmul_k_slices): 1 or 2
  int slices;                   // units a tile runs as: 1, or `halves` units meeting in `exchange`
  k_slices::Exchange exchange;  // where halves meet, or a block sets its first half aside
  MatmulEpilogue epilogue;
};

using epilogue::silu_mul;
using epilogue::store_pair;
using epilogue::StoreTarget;

// kRows: rows of A a block covers: 16, 32 or 64 with one consumer warpgroup, 128 with two.
// A consumer's wgmma always spans 64 rows; when a tile has fewer, the rows past it read whatever
// follows the tile's A region in shared memory (the next stages) and are never stored: a row's
// result depends on its own A row only. Small tiles load fewer A rows per stage, so a decode
// step keeps more weight bytes in flight. kCluster 2: two blocks (adjacent row tiles, same
// weight rows) each load half of the weight tile and multicast it to both, halving its L2 reads.
//
// kSub: 64-wide K boxes per stage. A decode tile's boxes are small (16 x 64 of A, 32 x 64 of W:
// 6 KB), and one block that waits, loads and frees a stage per box cannot stream more than
// ~15 GB/s from one SM; kSub boxes per stage move kSub times the bytes per barrier round trip.
// The wgmmas still run over K in ascending 16-wide steps, so the bits are those of kSub 1.
//
// kRegA: A is read into registers (ldmatrix, each warp its 16 rows of the wgmma's 64) and the
// wgmmas take it from there, so only W streams through the tensor cores' shared-memory reads;
// a one-consumer tile's rows past BM load whatever follows, as above, and are never stored.
template <int kRows, int kBN, int kStages, int kCluster, int kSub = 1, bool kRegA = false>
struct Config {
  static constexpr int kConsumers = kRows > 64 ? kRows / 64 : 1;
  static constexpr int BM = kRows, BN = kBN, kThreads = 128 * (kConsumers + 1), kBoxes = kSub;
  static constexpr bool kRegisterA = kRegA;
  static_assert(!kRegA || kConsumers == 1, "register A: one consumer warpgroup");
  static constexpr int kABoxBytes = BM * kRowBytes, kBBoxBytes = BN * kRowBytes;
  static constexpr int kABytes = kABoxBytes * kSub, kBBytes = kBBoxBytes * kSub;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr size_t kBarrierOffset = size_t(kStageBytes) * kStages;
  static constexpr size_t kSmemBytes = kBarrierOffset + 2 * 8 * kStages + 1024;
  // Two blocks per SM where shared memory allows (small tiles stream weights); one otherwise,
  // with registers moved from the producer to the consumers.
  static constexpr int kMinBlocks = kConsumers == 1 && kSmemBytes <= 113 * 1024 ? 2 : 1;
  static constexpr bool kMoveRegisters = kConsumers == 2;
  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0, "swizzle atoms are 1024 bytes");
  static_assert(kCluster == 1 || kSub == 1, "clusters load one box per stage");
  static_assert(kRows % 64 == 0 ||
                    size_t(kABytes) * kStages - kABoxBytes + 64 * kRowBytes <= kBarrierOffset,
                "a small tile's 64-row wgmma must stay inside the stages");
};

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// The consumer warpgroups of a block (not the producer), on named barrier 1.
template <int kThreads>
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory");
}
// Whether `v` holds for any consumer thread of the block: a named-barrier reduction.
template <int kThreads>
__device__ __forceinline__ bool consumers_any(bool v) {
  uint32_t r;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, 1, %2, p;\n"
      " selp.u32 %0, 1, 0, q;\n}"
      : "=r"(r)
      : "r"(uint32_t(v)), "n"(kThreads)
      : "memory");
  return r != 0;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::
                   : "memory");
}
// Arrives on the mbarrier at the same shared-memory offset in block `cta` of the cluster.
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t cta) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(smem_addr(bar)), "r"(cta));
  // Default semantics (release at CTA scope), as CUTLASS's ClusterBarrier::arrive: the
  // consumer's reads of its own stage are all this orders. `.release.cluster` fenced every
  // earlier access cluster-wide on each arrival and cost the clusters ~3x (H100: 2x128x128, o
  // at 128 rows, 93.9 -> 30.0 us with the per-lane arrivals below).
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
// tma_load into the same offset of every block of the cluster (mask 0b11).
__device__ __forceinline__ void tma_load_multicast(void* dst, const CUtensorMap* map, int x, int y,
                                                   uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_addr(bar)), "h"(uint16_t(3))
      : "memory");
}

template <typename T, typename C, int kStages, int kCluster, bool kSwiGLU>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    wgmma_matmul_kernel(const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BM = C::BM, BN = C::BN;
  extern __shared__ uint8_t smem_raw[];
  // Every consumer of every block of the cluster hands a stage back.
  const StageRing ring = stage_ring<C, kStages>(smem_raw, C::kConsumers * kCluster);
  uint8_t* a_smem = ring.a;
  uint8_t* b_smem = ring.b;
  uint64_t* full = ring.full;
  uint64_t* empty = ring.empty;
  const uint32_t rank = kCluster > 1 ? cluster_rank() : 0;
  if constexpr (kCluster > 1)
    cluster_sync();  // the partner's barriers exist before anything multicasts into them
  else
    __syncthreads();
  allow_dependents_early();

  // A unit is one output tile's K slice (all of K when p.slices is 1); it sums `chains` of the
  // K halves itself, one after the other (1: one chain, all of its K).
  const int units_m = (p.tiles_m + kCluster - 1) / kCluster;
  const int units = units_m * p.tiles_n * p.slices;
  const int first_unit = blockIdx.x / kCluster, unit_step = gridDim.x / kCluster;
  constexpr int kSub = C::kBoxes;
  const int k_tiles = (p.k / p.slices + kBK * kSub - 1) / (kBK * kSub);  // a slice's stages
  // Clusters sum whole K (resolve hands a halved launch to their one-block twins).
  const int chains = kCluster > 1 ? 1 : p.halves / p.slices, chain_tiles = k_tiles / chains;
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    // ---- Producer ----
    if constexpr (C::kMoveRegisters) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      // Box j of stage s holds K columns (kt * kSub + j) * 64 ... (K is a multiple of kSub boxes).
      auto load_w_box = [&](int s, int j, int kb, int tile) {
        const Segment& g = segment_of(p, tile);
        const int tn = tile - g.tile0;  // the column tile within its own weight
        uint8_t* dst = b_smem + size_t(s) * C::kBBytes + size_t(j) * C::kBBoxBytes;
        const int kt = kb;  // the 64-wide box of K
        if constexpr (kCluster > 1) {
          // This block's half of the weight tile, to both blocks; SwiGLU: rank 0 the gate
          // rows, rank 1 the up rows.
          dst += rank * (BN / 2) * kRowBytes;
          if constexpr (kSwiGLU)
            tma_load_multicast(dst, rank ? &p.map_w1 : &g.map, kt * kBK, tn * (BN / 2), &full[s]);
          else
            tma_load_multicast(dst, &g.map, kt * kBK, tn * BN + rank * (BN / 2), &full[s]);
        } else if constexpr (kSwiGLU) {
          tma_load(dst, &g.map, kt * kBK, tn * (BN / 2), &full[s]);
          tma_load(dst + (BN / 2) * kRowBytes, &p.map_w1, kt * kBK, tn * (BN / 2), &full[s]);
        } else {
          tma_load(dst, &g.map, kt * kBK, tn * BN, &full[s]);
        }
      };
      auto load_w = [&](int s, int kt, int tile) {
        for (int j = 0; j < kSub; ++j) load_w_box(s, j, kt * kSub + j, tile);
      };
      // Unit row um is the cluster's: this block's row tile is um * kCluster + rank.
      auto load_a = [&](int s, int kt, int um) {
        for (int j = 0; j < kSub; ++j)
          tma_load(a_smem + size_t(s) * C::kABytes + size_t(j) * C::kABoxBytes, &p.map_a,
                   (kt * kSub + j) * kBK, (um * kCluster + rank) * BM, &full[s]);
      };
      produce_stages<kStages, C::kStageBytes>(ring, first_unit, unit_step, units, units_m,
                                              p.tiles_n, k_tiles, p.slices, load_w, load_a);
    }
    __syncwarp();
  } else {
    // ---- Consumers ----
    if constexpr (C::kMoveRegisters) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    wait_for_producer();  // the epilogue reads and writes `out`, which earlier kernels may touch
    const int cw = wg - 1, t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
    float acc[BN / 2];
    int it = 0;
    for (int unit = first_unit; unit < units; unit += unit_step) {
      const UnitCoords u = unit_coords(unit, units_m, p.tiles_n, p.slices);
      const int tm = u.tm * kCluster + rank, tile = u.tn;
      const Segment& g = segment_of(p, tile);
      const int tn = tile - g.tile0;
      const StoreTarget target{g.out, g.n, p.epilogue};
      int prev = 0;
      // One arrival per consumer on every cluster block's `empty`, each from its own lane
      // (lane c to block c), so no one thread issues them one after another.
      auto release = [&](int s) {
        if constexpr (kCluster > 1) {
          if (t < kCluster) mbar_arrive_cluster(&empty[s], uint32_t(t));
        } else if (t == 0) {
          mbar_arrive(&empty[s]);
        }
      };
      // One stage: its wgmmas into acc (A from `frag` when kRegisterA), then the stage before
      // it handed back. `frag` alternates between two sets, so the set a stage's wgmmas read
      // is written again only after the wait that retires them.
      constexpr int kSteps = C::kRegisterA ? kSub * (kBK / 16) : 1;
      auto consume = [&](int kt, uint32_t(&frag)[kSteps][4]) {
        const int s = it % kStages;
        mbar_wait(&full[s], (it / kStages) & 1);
        const uint32_t a0 = smem_addr(a_smem + size_t(s) * C::kABytes + cw * 64 * kRowBytes);
        const uint32_t b0 = smem_addr(b_smem + size_t(s) * C::kBBytes);
        if constexpr (C::kRegisterA) {
          // The m16n8k16 A fragment of this warp's 16 rows (128-byte swizzled rows: chunk c of
          // row r at c ^ r % 8), k16 step kk of box j.
          const int row = warp * 16 + (lane & 15);
#pragma unroll
          for (int j = 0; j < kSub; ++j)
#pragma unroll
            for (int kk = 0; kk < kBK / 16; ++kk)
              ldmatrix_x4(frag[j * (kBK / 16) + kk],
                          a_smem + size_t(s) * C::kABytes + size_t(j) * C::kABoxBytes +
                              row * kRowBytes + (((2 * kk + (lane >> 4)) ^ (row % 8)) * 16));
        }
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) fence_register(acc[i]);
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < kSub; ++j) {  // K is a multiple of kSub boxes (wgmma_matmul)
          const uint32_t a = a0 + j * C::kABoxBytes, b = b0 + j * C::kBBoxBytes;
#pragma unroll
          for (int kk = 0; kk < kBK / 16; ++kk) {
            if constexpr (C::kRegisterA)
              WgmmaRs<T, BN, false>::run(acc, frag[j * (kBK / 16) + kk], smem_desc(b + kk * 32), 1);
            else
              Wgmma<T, BN>::run(acc, smem_desc(a + kk * 32), smem_desc(b + kk * 32), 1);
          }
        }
        wgmma_commit();
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) fence_register(acc[i]);
        if (kt > 0) {
          wgmma_wait<1>();  // the previous stage's wgmmas are done: hand it back
          release(prev);
        }
        prev = s;
        ++it;
      };
      // Where this thread's sums of a (tile, half) go in the workspace (kernels/k_slices.cuh):
      // the threads whose 16 rows of the wgmma's 64 are the tile's, each a slot, interleaved.
      constexpr int kSlots = 2 * BM;       // the threads whose rows are the tile's: 32 per 16 rows
      constexpr int kStride = 4 * kSlots;  // floats from one of a thread's float4s to the next
      constexpr int64_t kHalf = int64_t(BM) * BN;  // a (tile, half)'s sums
      const bool rows_of_tile = cw * 64 + warp * 16 < BM;
      // (Worked out where used: held across the K loop, it costs the widest tiles a spill.)
      auto half0 = [&] {
        return p.exchange.partial + 2 * (int64_t(tm) * p.tiles_n + tile) * kHalf +
               4 * ((cw * 4 + warp) * 32 + lane);
      };

      uint32_t frag[2][kSteps][4];
      for (int chain = 0; chain < chains; ++chain) {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
        int kt = 0;
        for (; kt + 1 < chain_tiles; kt += 2) {
          consume(kt, frag[0]);
          consume(kt + 1, frag[1]);
        }
        if (kt < chain_tiles) consume(kt, frag[0]);
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) fence_register(acc[i]);
        release(prev);
        // Both halves in this block: the first's sums wait in the workspace (this thread reads
        // back what it wrote: no fence) while the second's chain runs from zero.
        if (chain + 1 < chains && rows_of_tile) k_slices::store<kStride>(half0(), acc);
      }
      if (chains > 1 && rows_of_tile) k_slices::add<kStride>(acc, half0());

      // The halves on two blocks: this one's sums go to the exchange, and the tile's second to
      // finish adds the other's and runs the epilogue. Not in clusters (resolve hands those to
      // their one-block twins, which sum both halves themselves).
      if (kCluster == 1 && p.slices > 1) {
        constexpr int kConsumerThreads = 128 * C::kConsumers;
        float* const mine = half0() + u.slice * kHalf;
        const int64_t tile_id = int64_t(tm) * p.tiles_n + tile;
        if (rows_of_tile) k_slices::store<kStride>(mine, acc);
        __threadfence();
        consumers_sync<kConsumerThreads>();
        const bool second =
            threadIdx.x == 128 && k_slices::arrive_second(&p.exchange.counters[tile_id]);
        if (!consumers_any<kConsumerThreads>(second)) continue;
        __threadfence();
        if (rows_of_tile) k_slices::add<kStride>(acc, mine + (u.slice ? -kHalf : kHalf));
      }

      // Epilogue: the same arithmetic per element in every tiling.
      const int local0 = cw * 64 + warp * 16 + lane / 4;
      constexpr int kOutGroups = kSwiGLU ? BN / 16 : BN / 8;
      const int col0 = (kSwiGLU ? tn * (BN / 2) : tn * BN) + 2 * (lane % 4);
#pragma unroll
      for (int j = 0; j < kOutGroups; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int local = local0 + 8 * h, row = tm * BM + local, col = col0 + 8 * j;
          if (local >= BM || row >= p.m || col >= g.n) continue;
          float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
          if constexpr (kSwiGLU) {
            v0 = silu_mul(v0, acc[4 * j + 2 * h + BN / 4]);
            v1 = silu_mul(v1, acc[4 * j + 2 * h + 1 + BN / 4]);
          } else if (g.bias) {
            v0 = __fadd_rn(v0, g.bias[col]);
            if (col + 1 < g.n) v1 = __fadd_rn(v1, g.bias[col + 1]);
          }
          store_pair<T>(target, row, col, v0, v1);
        }
    }
  }
  // A block may still receive the partner's arrivals and multicasts until both are done.
  if constexpr (kCluster > 1) cluster_sync();
#else
  (void)p;
  __trap();
#endif
}

// ---- Host side ----

// A [rows, k] 16-bit matrix with rows `ld` elements apart, read as boxes of 64 x box_rows.
CUtensorMap tensor_map(Half type, const void* ptr, int rows, int k, int64_t ld, int box_rows) {
  return swizzled_k_major_map(
      type == Half::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2,
      ptr, rows, k, ld, kBK, box_rows, "wgmma_matmul");
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

template <typename T, int kRows, int kBN, int kStages, int kCluster, bool kSwiGLU, int kSub = 1,
          bool kRegA = false>
void launch(Half type, const MatmulArgs& a, int64_t lda, const std::array<MatmulSegment, 3>& segs,
            Params p, cudaStream_t stream) {
  using C = Config<kRows, kBN, kStages, kCluster, kSub, kRegA>;
  static_assert(C::kSmemBytes <= 227 * 1024, "tile configuration exceeds shared memory");
  auto kernel = wgmma_matmul_kernel<T, C, kStages, kCluster, kSwiGLU>;
  cudaLaunchConfig_t config{};
  config.blockDim = dim3(C::kThreads);
  config.dynamicSmemBytes = C::kSmemBytes;
  config.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = kCluster;
  attr[1].val.clusterDim.y = 1;
  attr[1].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 2;
  // Blocks (clusters) that fit the GPU at once: the persistent grid.
  static PerDeviceOnce configured;  // per device: tensor-parallel ranks, any host thread
  configured.run(current_device(), [&] {
    HEARTH_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(C::kSmemBytes)));
  });
  // The same on every device of one process (they are alike): asked once.
  static const int resident = [&] {
    int n = 0;
    if constexpr (kCluster > 1) {
      config.gridDim = dim3(kCluster * device_sm_count());
      HEARTH_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, kernel, &config));
    } else {
      HEARTH_CUDA_CHECK(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, C::kThreads, C::kSmemBytes));
      n *= device_sm_count();
    }
    if (n < 1) throw std::runtime_error("wgmma_matmul: tile configuration does not fit an SM");
    return n;
  }();
  const int w_box = kSwiGLU || kCluster > 1 ? kBN / 2 : kBN;
  p.map_a = tensor_map(type, a.a, a_map_rows(a.m, a.a_rows_readable, kRows), a.k, lda, kRows);
  if (kSwiGLU) p.map_w1 = tensor_map(type, a.w_up, a.n, a.k, a.k, w_box);
  // Each weight its own descriptor and run of column tiles, numbered as if launched alone.
  int tiles_n = 0;
  for (int s = 0; s < p.segments; ++s) {
    p.seg[s].map = tensor_map(type, segs[s].w, segs[s].n, a.k, a.k, w_box);
    p.seg[s].tile0 = tiles_n;
    tiles_n += int(ceil_div(segs[s].n, kSwiGLU ? kBN / 2 : kBN));
  }
  p.tiles_m = int(ceil_div(a.m, kRows));
  p.tiles_n = tiles_n;
  const int64_t units = ceil_div(p.tiles_m, kCluster) * p.tiles_n * p.slices;
  if (kCluster > 1 && p.halves > 1)
    throw std::logic_error("wgmma_matmul: K halves are not summed in clusters");
  if (p.halves > 1)
    p.exchange = k_slices::exchange_in(
        a.workspace, a.workspace_bytes,
        size_t(ceil_div(p.tiles_m, kCluster) * kCluster) * p.tiles_n,
        size_t(ceil_div(p.tiles_m, kCluster) * kCluster) * kRows * p.tiles_n * kBN * p.halves,
        "wgmma_matmul");
  config.gridDim = dim3(unsigned(kCluster * std::min<int64_t>(units, resident)));
  static const bool debug = [&] {
    if (!std::getenv("HEARTH_WGMMA_DEBUG")) return false;
    std::fprintf(stderr, "wgmma_matmul %dx%d stages %d cluster %d: %d resident, %zu B smem\n",
                 kRows, kBN, kStages, kCluster, resident, C::kSmemBytes);
    return true;
  }();
  (void)debug;
  HEARTH_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, p));
}

// A four-box decode tile, A in shared memory or (its RegA twin) in registers: one stage count
// for both forms.
template <typename T, int kRows, int kBN, int kStages, bool kSwiGLU>
void launch_four_box(bool register_a, Half type, const MatmulArgs& a, int64_t lda,
                     const std::array<MatmulSegment, 3>& segs, const Params& p,
                     cudaStream_t stream) {
  if (register_a)
    return launch<T, kRows, kBN, kStages, 1, kSwiGLU, 4, true>(type, a, lda, segs, p, stream);
  launch<T, kRows, kBN, kStages, 1, kSwiGLU, 4>(type, a, lda, segs, p, stream);
}

template <typename T, bool kSwiGLU>
void dispatch(Half type, WgmmaTiles tiles, const MatmulArgs& a, int64_t lda,
              const std::array<MatmulSegment, 3>& segs, const Params& p, cudaStream_t stream) {
  // Stages: about 100 KB of pipeline for tiles that run two blocks per SM, ~200 KB otherwise.
  switch (tiles) {
    case WgmmaTiles::M16N32:
      return launch<T, 16, 32, 16, 1, kSwiGLU>(type, a, lda, segs, p, stream);
    case WgmmaTiles::M16N64:
      return launch<T, 16, 64, 10, 1, kSwiGLU>(type, a, lda, segs, p, stream);
    case WgmmaTiles::M16N112:
      return launch<T, 16, 112, 6, 1, kSwiGLU>(type, a, lda, segs, p, stream);
    case WgmmaTiles::M32N32:
      return launch<T, 32, 32, 12, 1, kSwiGLU>(type, a, lda, segs, p, stream);
    case WgmmaTiles::M32N112:
      return launch<T, 32, 112, 6, 1, kSwiGLU>(type, a, lda, segs, p, stream);
    case WgmmaTiles::M64N112:
      return launch<T, 64, 112, 5, 1, kSwiGLU>(type, a, lda, segs, p, stream);
    case WgmmaTiles::M64N64:
      return launch<T, 64, 64, 6, 1, kSwiGLU>(type, a, lda, segs, p, stream);
    case WgmmaTiles::M16N32Deep:
      return launch<T, 16, 32, 32, 1, kSwiGLU>(type, a, lda, segs, p, stream);
    case WgmmaTiles::M16N32DeepK256:
    case WgmmaTiles::M16N32DeepK256RegA:
      return launch_four_box<T, 16, 32, 8, kSwiGLU>(tiles == WgmmaTiles::M16N32DeepK256RegA, type,
                                                    a, lda, segs, p, stream);
    case WgmmaTiles::M16N48DeepK256:
    case WgmmaTiles::M16N48DeepK256RegA:
      return launch_four_box<T, 16, 48, 6, kSwiGLU>(tiles == WgmmaTiles::M16N48DeepK256RegA, type,
                                                    a, lda, segs, p, stream);
    case WgmmaTiles::M16N24DeepK256:
    case WgmmaTiles::M16N24DeepK256RegA:
      return launch_four_box<T, 16, 24, 10, kSwiGLU>(tiles == WgmmaTiles::M16N24DeepK256RegA, type,
                                                     a, lda, segs, p, stream);
    case WgmmaTiles::M32N32DeepK256:
    case WgmmaTiles::M32N32DeepK256RegA:
      return launch_four_box<T, 32, 32, 6, kSwiGLU>(tiles == WgmmaTiles::M32N32DeepK256RegA, type,
                                                    a, lda, segs, p, stream);
    case WgmmaTiles::M32N48DeepK256:
    case WgmmaTiles::M32N48DeepK256RegA:
      return launch_four_box<T, 32, 48, 5, kSwiGLU>(tiles == WgmmaTiles::M32N48DeepK256RegA, type,
                                                    a, lda, segs, p, stream);
    case WgmmaTiles::M48N32DeepK256:
    case WgmmaTiles::M48N32DeepK256RegA:
      return launch_four_box<T, 48, 32, 5, kSwiGLU>(tiles == WgmmaTiles::M48N32DeepK256RegA, type,
                                                    a, lda, segs, p, stream);
    case WgmmaTiles::M48N48DeepK256:
    case WgmmaTiles::M48N48DeepK256RegA:
      return launch_four_box<T, 48, 48, 4, kSwiGLU>(tiles == WgmmaTiles::M48N48DeepK256RegA, type,
                                                    a, lda, segs, p, stream);
    case WgmmaTiles::M64N32DeepK256:
    case WgmmaTiles::M64N32DeepK256RegA:
      return launch_four_box<T, 64, 32, 4, kSwiGLU>(tiles == WgmmaTiles::M64N32DeepK256RegA, type,
                                                    a, lda, segs, p, stream);
    case WgmmaTiles::M64N48DeepK256:
    case WgmmaTiles::M64N48DeepK256RegA:
      return launch_four_box<T, 64, 48, 4, kSwiGLU>(tiles == WgmmaTiles::M64N48DeepK256RegA, type,
                                                    a, lda, segs, p, stream);
    case WgmmaTiles::M16N16DeepK256:
      return launch<T, 16, 16, 12, 1, kSwiGLU, 4>(type, a, lda, segs, p, stream);
    case WgmmaTiles::M16N8DeepK256:
      return launch<T, 16, 8, 16, 1, kSwiGLU, 4>(type, a, lda, segs, p, stream);
    case WgmmaTiles::M32N32Deep:
      return launch<T, 32, 32, 24, 1, kSwiGLU>(type, a, lda, segs, p, stream);
    case WgmmaTiles::M64N32Deep:
      return launch<T, 64, 32, 16, 1, kSwiGLU>(type, a, lda, segs, p, stream);
    case WgmmaTiles::M64N64Deep:
      return launch<T, 64, 64, 12, 1, kSwiGLU>(type, a, lda, segs, p, stream);
    case WgmmaTiles::M64N128:
      return launch<T, 64, 128, 4, 1, kSwiGLU>(type, a, lda, segs, p, stream);
    case WgmmaTiles::M64N256:
      return launch<T, 64, 256, 5, 1, kSwiGLU>(type, a, lda, segs, p, stream);
    case WgmmaTiles::M128N64:
      return launch<T, 128, 64, 8, 1, kSwiGLU>(type, a, lda, segs, p, stream);
    case WgmmaTiles::M128N128:
      return launch<T, 128, 128, 6, 1, kSwiGLU>(type, a, lda, segs, p, stream);
    case WgmmaTiles::M128N192:
      return launch<T, 128, 192, 5, 1, kSwiGLU>(type, a, lda, segs, p, stream);
    case WgmmaTiles::M128N224:
      return launch<T, 128, 224, 5, 1, kSwiGLU>(type, a, lda, segs, p, stream);
    case WgmmaTiles::M128N256:
      return launch<T, 128, 256, 4, 1, kSwiGLU>(type, a, lda, segs, p, stream);
    case WgmmaTiles::M256N128:
      return launch<T, 128, 128, 6, 2, kSwiGLU>(type, a, lda, segs, p, stream);
    default:
      return launch<T, 128, 256, 4, 2, kSwiGLU>(type, a, lda, segs, p, stream);
  }
}

bool four_boxes(WgmmaTiles t) {
  switch (t) {
    case WgmmaTiles::M16N32DeepK256:
    case WgmmaTiles::M16N48DeepK256:
    case WgmmaTiles::M16N32DeepK256RegA:
    case WgmmaTiles::M16N48DeepK256RegA:
    case WgmmaTiles::M16N24DeepK256RegA:
    case WgmmaTiles::M32N32DeepK256RegA:
    case WgmmaTiles::M32N48DeepK256RegA:
    case WgmmaTiles::M48N32DeepK256RegA:
    case WgmmaTiles::M48N48DeepK256RegA:
    case WgmmaTiles::M64N32DeepK256RegA:
    case WgmmaTiles::M64N48DeepK256RegA:
    case WgmmaTiles::M16N24DeepK256:
    case WgmmaTiles::M16N16DeepK256:
    case WgmmaTiles::M16N8DeepK256:
    case WgmmaTiles::M32N32DeepK256:
    case WgmmaTiles::M32N48DeepK256:
    case WgmmaTiles::M48N32DeepK256:
    case WgmmaTiles::M48N48DeepK256:
    case WgmmaTiles::M64N32DeepK256:
    case WgmmaTiles::M64N48DeepK256:
      return true;
    default:
      return false;
  }
}

// The prompt-size tilings the rule weighs, with the fraction of the best's rate one full wave of
// each achieves. Fitted on the H200 (session 23: every tiling at 80-2,048 rows of the 8B's q/k/v,
// o, gate/up and down; kernels/notes/wgmma_matmul.md "128x224 tiles and clusters in the rule"):
// on those measurements the rule's picks cost 0.4% more than the best tiling's in sum (session
// 22's candidates: 4.7%; tests/kernels/wgmma_tiling_rule_test.cc). The weight-sharing cluster
// 2x128x256 halves each block's weight reads from L2, which the widest shapes are bound by
// (gate/up at 1,024-2,048 rows: 5-7% faster than 128x256; o at 1,024 rows 9% slower, the worst
// pick left); 2x128x128 gained too little to keep.
constexpr tiling::Candidate<WgmmaTiles> kPromptCandidates[] = {
    {WgmmaTiles::M64N64, 64, 64, 2, 0.45},     {WgmmaTiles::M64N64Deep, 64, 64, 1, 0.4},
    {WgmmaTiles::M64N128, 64, 128, 2, 0.7},    {WgmmaTiles::M64N256, 64, 256, 1, 0.7},
    {WgmmaTiles::M128N64, 128, 64, 1, 0.75},   {WgmmaTiles::M128N128, 128, 128, 1, 0.95},
    {WgmmaTiles::M128N192, 128, 192, 1, 0.97}, {WgmmaTiles::M128N224, 128, 224, 1, 0.985},
    {WgmmaTiles::M128N256, 128, 256, 1, 1.0},  {WgmmaTiles::M256N256, 128, 256, 1, 1.04, 2}};

// Units a tile of `tiles` runs as for this launch: 2 where K is summed in halves and the rule
// (or `at`) puts them on two blocks; decode tiles and clusters sum both in one.
int units_per_tile(WgmmaTiles tiles, KHalvesAt at, int m,
                   const std::array<int, kMaxSegments>& widths, int k, bool swiglu) {
  const int halves = wgmma_matmul_k_slices(k);
  if (halves == 1 || at == KHalvesAt::InOneBlock) return 1;
  if (at == KHalvesAt::OnTwoBlocks) return halves;
  const tiling::LaunchShape shape{m, widths, k, swiglu, 4 * kBK, device_sm_count(), halves};
  for (const auto& c : kPromptCandidates)
    if (c.tiles == tiles) return tiling::units_per_tile(shape, c);
  return 1;
}

}  // namespace

// Any choice gives the same bits; this one is about speed (kernels/matmul_tiling.h: the rule
// both wgmma matmuls share). widths: each weight's columns (0 past the last).
WgmmaTiles wgmma_matmul_rule(int m, const std::array<int, 3>& widths, int k, bool swiglu, int sms) {
  // Up to 8 rows, warps of 16 weight rows each stream faster than any one-consumer wgmma tile
  // (H200, 8B, 1 row: q/k/v 13.2 us against 16.7, o 11.6 against 13.6, down 36.1 against 41.8;
  // serving one stream 184 -> 197 tok/s), where one round of resident warps covers the launch
  // and leaves no SM without one: measured at 256-384 warps. Past one round the wide wgmma tiles
  // already stream well and the warps would queue (the 8B's head, 8,016 warps: 0.274 ms a step
  // against 0.258; its gate/up, SwiGLU, 61.3 us against 58.3); below one warp an SM (a TP=4
  // shard's q/k/v, 96) it is unmeasured, so the wgmma rule keeps both. Where a warp per 8
  // weight rows (twice the warps, four an SM) still fits one round, those stream faster again
  // (o and down of the 8B, 512 warps: 11.7 -> 10.7 us and 36.4 -> 31.8, cuBLASLt 32.4; serving
  // one stream 198 -> 201 tok/s, eight 1,516 -> 1,570); past it they queue (q/k/v's 768: 19.1 us
  // against 13.2).
  const int64_t warps = stream_matmul_warps(widths, swiglu, false);
  if (stream_matmul_fits(m, k) && !swiglu && warps >= sms && warps <= kStreamWarpsPerSm * sms) {
    const int64_t eight_row_warps = stream_matmul_warps(widths, false, true);
    return eight_row_warps <= kStreamWarpsPerSmEightRows * sms ? WgmmaTiles::M8Stream8
                                                               : WgmmaTiles::M8Stream;
  }
  const tiling::LaunchShape shape{m, widths, k, swiglu, 4 * kBK, sms, wgmma_matmul_k_slices(k)};
  switch (tiling::decode_tile(shape)) {
    case tiling::DecodeTile::M16N32DeepFourBoxes:
      return WgmmaTiles::M16N32DeepK256RegA;
    case tiling::DecodeTile::M16N48DeepFourBoxes:
      return WgmmaTiles::M16N48DeepK256RegA;
    case tiling::DecodeTile::M16N24DeepFourBoxes:
      return WgmmaTiles::M16N24DeepK256RegA;
    case tiling::DecodeTile::M32N32DeepFourBoxes:
      return WgmmaTiles::M32N32DeepK256RegA;
    case tiling::DecodeTile::M32N48DeepFourBoxes:
      return WgmmaTiles::M32N48DeepK256RegA;
    case tiling::DecodeTile::M48N32DeepFourBoxes:
      return WgmmaTiles::M48N32DeepK256RegA;
    case tiling::DecodeTile::M48N48DeepFourBoxes:
      return WgmmaTiles::M48N48DeepK256RegA;
    case tiling::DecodeTile::M64N32DeepFourBoxes:
      return WgmmaTiles::M64N32DeepK256RegA;
    case tiling::DecodeTile::M64N48DeepFourBoxes:
      return WgmmaTiles::M64N48DeepK256RegA;
    case tiling::DecodeTile::M16N32Deep:
      return WgmmaTiles::M16N32Deep;
    case tiling::DecodeTile::M16N64:
      return WgmmaTiles::M16N64;
    case tiling::DecodeTile::M16N112:
      return WgmmaTiles::M16N112;
    case tiling::DecodeTile::M16N32:
      return WgmmaTiles::M16N32;
    case tiling::DecodeTile::M32N32Deep:
      return WgmmaTiles::M32N32Deep;
    case tiling::DecodeTile::M32N32:
      return WgmmaTiles::M32N32;
    case tiling::DecodeTile::M32N112:
      return WgmmaTiles::M32N112;
    case tiling::DecodeTile::M64N112:
      return WgmmaTiles::M64N112;
    case tiling::DecodeTile::M64N32Deep:
      return WgmmaTiles::M64N32Deep;
    case tiling::DecodeTile::M64N64Deep:
      return WgmmaTiles::M64N64Deep;
    case tiling::DecodeTile::M64N64:
      return WgmmaTiles::M64N64;
    case tiling::DecodeTile::Large:
      break;
  }
  return tiling::fewest_rounds(shape, kPromptCandidates);
}

const char* wgmma_tiles_name(WgmmaTiles t) {
  switch (t) {
    case WgmmaTiles::Auto:
      return "auto";
    case WgmmaTiles::M16N32:
      return "16x32";
    case WgmmaTiles::M16N64:
      return "16x64";
    case WgmmaTiles::M16N112:
      return "16x112";
    case WgmmaTiles::M32N32:
      return "32x32";
    case WgmmaTiles::M64N64:
      return "64x64";
    case WgmmaTiles::M16N32Deep:
      return "16x32deep";
    case WgmmaTiles::M16N32DeepK256:
      return "16x32deep-k256";
    case WgmmaTiles::M16N48DeepK256:
      return "16x48deep-k256";
    case WgmmaTiles::M16N32DeepK256RegA:
      return "16x32deep-k256-ra";
    case WgmmaTiles::M16N48DeepK256RegA:
      return "16x48deep-k256-ra";
    case WgmmaTiles::M16N24DeepK256RegA:
      return "16x24deep-k256-ra";
    case WgmmaTiles::M32N32DeepK256RegA:
      return "32x32deep-k256-ra";
    case WgmmaTiles::M32N48DeepK256RegA:
      return "32x48deep-k256-ra";
    case WgmmaTiles::M48N32DeepK256RegA:
      return "48x32deep-k256-ra";
    case WgmmaTiles::M48N48DeepK256RegA:
      return "48x48deep-k256-ra";
    case WgmmaTiles::M64N32DeepK256RegA:
      return "64x32deep-k256-ra";
    case WgmmaTiles::M64N48DeepK256RegA:
      return "64x48deep-k256-ra";
    case WgmmaTiles::M16N24DeepK256:
      return "16x24deep-k256";
    case WgmmaTiles::M16N16DeepK256:
      return "16x16deep-k256";
    case WgmmaTiles::M16N8DeepK256:
      return "16x8deep-k256";
    case WgmmaTiles::M32N32DeepK256:
      return "32x32deep-k256";
    case WgmmaTiles::M32N48DeepK256:
      return "32x48deep-k256";
    case WgmmaTiles::M48N32DeepK256:
      return "48x32deep-k256";
    case WgmmaTiles::M48N48DeepK256:
      return "48x48deep-k256";
    case WgmmaTiles::M64N32DeepK256:
      return "64x32deep-k256";
    case WgmmaTiles::M64N48DeepK256:
      return "64x48deep-k256";
    case WgmmaTiles::M8Stream:
      return "8-stream";
    case WgmmaTiles::M8Stream8:
      return "8-stream-8";
    case WgmmaTiles::M32N112:
      return "32x112";
    case WgmmaTiles::M64N112:
      return "64x112";
    case WgmmaTiles::M32N32Deep:
      return "32x32deep";
    case WgmmaTiles::M64N32Deep:
      return "64x32deep";
    case WgmmaTiles::M64N64Deep:
      return "64x64deep";
    case WgmmaTiles::M64N128:
      return "64x128";
    case WgmmaTiles::M64N256:
      return "64x256";
    case WgmmaTiles::M128N64:
      return "128x64";
    case WgmmaTiles::M128N128:
      return "128x128";
    case WgmmaTiles::M128N192:
      return "128x192";
    case WgmmaTiles::M128N224:
      return "128x224";
    case WgmmaTiles::M128N256:
      return "128x256";
    case WgmmaTiles::M256N128:
      return "2x128x128";
    case WgmmaTiles::M256N256:
      return "2x128x256";
  }
  return "?";
}

int wgmma_matmul_k_slices(int k) {
  return k >= 12288 && k % (2 * kStreamStageK) == 0 ? 2 : 1;
}

size_t wgmma_matmul_workspace_bytes(int m, int n, int k, bool swiglu) {
  const int slices = wgmma_matmul_k_slices(k);
  if (slices == 1) return 0;
  // Whole tiles of any tiling: up to 128 rows past m (a cluster's second tile, 128 more), each
  // of three segments up to a 256-wide tile past its columns (SwiGLU: gate and up columns).
  const int64_t rows = int64_t(m) + 256, cols = (swiglu ? 2 * int64_t(n) : n) + 3 * 256;
  return k_slices::kCounterBytes + size_t(rows * cols * slices) * sizeof(float);
}

bool wgmma_matmul_available() {
  static const bool ok = [] {
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
      return false;
    if (major != 9 || minor != 0) return false;
    cudaFuncAttributes attr{};
    auto kernel = wgmma_matmul_kernel<__nv_bfloat16, Config<16, 32, 16, 1>, 16, 1, false>;
    return cudaFuncGetAttributes(&attr, kernel) == cudaSuccess && attr.binaryVersion == 90;
  }();
  return ok;
}

namespace {

// Each segment's columns (0: none): the tiling is chosen for the whole launch.
std::array<int, kMaxSegments> widths_of(const std::array<MatmulSegment, 3>& segs, int segments) {
  std::array<int, kMaxSegments> widths{};
  for (int s = 0; s < segments; ++s) widths[s] = segs[s].n;
  return widths;
}

// The tiling a launch runs: `tiles` (Auto: wgmma_matmul_rule's) where the launch's K and epilogue
// allow it, else one that does (any tiling gives the same bits).
WgmmaTiles resolve(WgmmaTiles tiles, bool swiglu, const MatmulArgs& a,
                   const std::array<int, kMaxSegments>& widths) {
  if (tiles == WgmmaTiles::Auto)
    tiles = wgmma_matmul_rule(a.m, widths, a.k, swiglu, device_sm_count());
  // Four boxes a stage need K in whole stages: a box past K in the consumers' loop would be a
  // divergent path (ptxas then serialises every wgmma).
  if (four_boxes(tiles) && a.k % (4 * kBK) != 0) tiles = WgmmaTiles::M16N32Deep;
  // The SwiGLU epilogue pairs whole 8-column groups of gate and up: a tile of 24 or 8 weight
  // rows (12 or 4 of each) has none; 16 has one of each.
  if (swiglu && (tiles == WgmmaTiles::M16N24DeepK256 || tiles == WgmmaTiles::M16N24DeepK256RegA ||
                 tiles == WgmmaTiles::M16N8DeepK256))
    tiles = WgmmaTiles::M16N16DeepK256;
  // The streaming tile past its rows or K.
  if ((tiles == WgmmaTiles::M8Stream || tiles == WgmmaTiles::M8Stream8) &&
      !stream_matmul_fits(a.m, a.k))
    tiles = WgmmaTiles::M16N32Deep;
  if (tiles == WgmmaTiles::M8Stream8 && swiglu) tiles = WgmmaTiles::M8Stream;
  // Clusters do not sum K halves: their one-block twins do, with the same bits.
  if (wgmma_matmul_k_slices(a.k) > 1 && tiles == WgmmaTiles::M256N128) tiles = WgmmaTiles::M128N128;
  if (wgmma_matmul_k_slices(a.k) > 1 && tiles == WgmmaTiles::M256N256) tiles = WgmmaTiles::M128N256;
  return tiles;
}

}  // namespace

WgmmaTiles wgmma_matmul_tiles(MatmulEpilogue epilogue, const MatmulArgs& a, WgmmaTiles tiles) {
  std::array<MatmulSegment, 3> segs;
  const int segments = matmul_segments(a, segs);
  return resolve(tiles, epilogue == MatmulEpilogue::SwiGLU, a, widths_of(segs, segments));
}

void wgmma_matmul(Half type, MatmulEpilogue epilogue, const MatmulArgs& a, WgmmaTiles tiles,
                  cudaStream_t stream, KHalvesAt halves_at) {
  const bool swiglu = epilogue == MatmulEpilogue::SwiGLU;
  const int64_t lda = checked_matmul_lda("wgmma_matmul", epilogue, a);
  std::array<MatmulSegment, 3> segs;
  Params p{};
  p.segments = matmul_segments(a, segs);
  for (int s = 0; s < p.segments; ++s) {
    p.seg[s].bias = segs[s].bias;
    p.seg[s].out = segs[s].out;
    p.seg[s].n = segs[s].n;
  }
  const std::array<int, kMaxSegments> widths = widths_of(segs, p.segments);
  tiles = resolve(tiles, swiglu, a, widths);
  if (tiles == WgmmaTiles::M8Stream || tiles == WgmmaTiles::M8Stream8)
    return stream_matmul(type, epilogue, a, lda, segs, p.segments, tiles == WgmmaTiles::M8Stream8,
                         stream);
  p.m = a.m;
  p.k = a.k;
  p.halves = wgmma_matmul_k_slices(a.k);
  p.slices = units_per_tile(tiles, halves_at, a.m, widths, a.k, swiglu);
  p.epilogue = epilogue;
  HEARTH_DISPATCH_HALF(type, T, {
    if (swiglu)
      dispatch<T, true>(type, tiles, a, lda, segs, p, stream);
    else
      dispatch<T, false>(type, tiles, a, lda, segs, p, stream);
  });
}

}  // namespace hearth::kernels
