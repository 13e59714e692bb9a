// Row-invariant matmul: out[m, n] = A[m, :] . W[n, :] with m16n8k16 tensor-core MMAs. On a
// compute-capability 9.0 GPU batch_matmul hands every call to the wgmma kernel instead
// (kernels/wgmma_matmul.h); this one is batch_matmul_mma, the fallback elsewhere.
//
// Why every tile shape gives the same bits: an output element lives in one fp32 accumulator
// register; each K slice (batch_matmul_k_slices: a function of N and K only) is a chain of MMAs
// over its k16 steps in ascending order, started from zero; slices are added in order. An MMA's
// result for row i depends on row i of A alone, so neither M, nor the row's place in the tile,
// nor the tile shape changes the arithmetic. Three tilings share one cp.async-pipelined kernel
// template: Skinny (16, 32 or 64 rows x 32 weight rows, 4 warps) streams the weights for decode
// steps, Medium (64 x 128) serves mid-sized steps and Large (128 x 256, 8 warps of 64 x 64)
// prompt chunks. A block either walks the K slices in order itself, folding each slice into
// per-thread totals in shared memory, or (Skinny, and Medium up to 256 rows) takes one slice
// (grid.y), publishes its partial in the workspace, and the last block of the tile to finish
// (an integer counter picks it) adds the partials in slice order.
// Weight tiles stream in before the block waits for the kernel that produced A (programmatic
// dependent launch).
#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/batch_ops.h"
#include "kernels/cuda_check.h"
#include "kernels/device_scope.h"
#include "kernels/per_device_once.h"
#include "kernels/device_sm_count.h"
#include "kernels/half_utils.cuh"
#include "kernels/matmul_epilogue.cuh"
#include "kernels/mma.cuh"
#include "kernels/pdl.cuh"
#include "kernels/wgmma_matmul.h"

namespace hearth::kernels {

namespace {

// kBN counts weight rows per tile: for SwiGLU, half are gate rows and half the matching up
// rows (each warp's columns are split that way), so a tile makes kBN / 2 outputs.
template <int kBM, int kBN, int kBK, int kWarpsM, int kWarpsN, int kStages>
struct Tiles {
  static constexpr int BM = kBM, BN = kBN, BK = kBK, WM = kWarpsM, WN = kWarpsN;
  static constexpr int kStagesN = kStages;
  static constexpr int kThreads = WM * WN * 32;
  static constexpr int WTM = BM / WM, WTN = BN / WN;  // one warp's tile
  static constexpr int MT = WTM / 16, NT = WTN / 8;   // its MMA tiles
  static constexpr size_t kStageBytes = size_t(BM + BN) * BK * 2;
  static constexpr size_t kPipelineBytes = kStageBytes * kStages;
  static constexpr size_t kTotalsBytes = size_t(BM) * BN * 4;
  static_assert(WTM % 16 == 0 && WTN % 8 == 0 && BK % 16 == 0);
};

// Tile shapes, chosen from measurements on an H100 (hearth-bench --batch-kernels): Skinny
// has 32 weight rows (SwiGLU: 32 gate + 32 up) per block, 4 warps of 8 (16) rows. Stages and
// K step are picked per row count so that the (tile, slice) blocks of the common shapes fit in
// one wave: 4 stages of 128 give 4 blocks per SM at 16 rows, where 5 stages (3 per SM) left a
// second, mostly idle wave (q/o_proj 19.8 -> 14.8 us, down_proj 56 -> 44 us at one row).
// SwiGLU tiles stream twice the weight rows and keep their own best. At 32 and 64 rows the
// warps split the rows too (2 x 2, 4 x 1), so each loads less of A per MMA from shared memory.
// None of this changes the arithmetic (see the top of the file).
template <int kBM>
using SkinnyTiles = std::conditional_t<
    kBM == 16, Tiles<16, 32, 128, 1, 4, 4>,
    std::conditional_t<kBM == 32, Tiles<32, 32, 128, 2, 2, 3>, Tiles<64, 32, 256, 4, 1, 2>>>;
template <int kBM>
using SkinnySwigluTiles = std::conditional_t<
    kBM == 16, Tiles<16, 64, 128, 1, 4, 5>,
    std::conditional_t<kBM == 32, Tiles<32, 64, 256, 2, 2, 2>, Tiles<64, 64, 128, 4, 1, 3>>>;
// Medium: 64 x 128 blocks. With K slices spread over blocks (M <= 256, few weight rows), or
// walking them itself.
using MediumSpreadTiles = Tiles<64, 128, 32, 2, 2, 4>;
using MediumTiles = Tiles<64, 128, 64, 2, 2, 3>;
// Large: 128 x 256 blocks, 8 warps of 64 x 64; two stages when slice totals need the room.
using LargeTiles = Tiles<128, 256, 64, 2, 4, 3>;
using LargeSlicedTiles = Tiles<128, 256, 64, 2, 4, 2>;

constexpr int kSkinnyMaxM = 64;
// Counters of blocks that spread K slices live at the start of the workspace, in a region of
// fixed size: partials never overwrite them, whatever the shape of earlier launches.
constexpr int kMaxCounters = 16384;
constexpr size_t kCounterBytes = kMaxCounters * sizeof(unsigned);

struct Params {
  const void* a;
  int64_t lda;
  const void* w0;
  const void* w1;
  const float* bias;
  int m, n, k;
  int slices, slice_len;
  int tiles_m, tiles_n;
  void* out;
  float* partial;      // grid slices: [slices][tiles_m * BM][tiles_n * BN]
  unsigned* counters;  // grid slices: [tiles_m * tiles_n]
  MatmulEpilogue epilogue;
};

using epilogue::silu_mul;
using epilogue::store_pair;

template <typename T, typename C, bool kSwiGLU, bool kGridSlices>
__global__ void __launch_bounds__(C::kThreads) matmul_kernel(Params p) {
  constexpr int BM = C::BM, BN = C::BN, BK = C::BK, MT = C::MT, NT = C::NT;
  constexpr int kStages = C::kStagesN, kChunks = BK / 8;
  constexpr int kAChunks = BM * kChunks / C::kThreads, kBChunks = BN * kChunks / C::kThreads;
  static_assert(kAChunks * C::kThreads == BM * kChunks && kBChunks * C::kThreads == BN * kChunks);
  static_assert(!kSwiGLU || NT % 2 == 0);
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  allow_dependents_early();

  // This block's tile, grouped by 8 along M so that neighbouring blocks share weight tiles.
  int tm, tn;
  {
    constexpr int kGroup = 8;
    const int pid = blockIdx.x, per_group = kGroup * p.tiles_n;
    const int first_m = pid / per_group * kGroup;
    const int group_m = min(p.tiles_m - first_m, kGroup);
    tm = first_m + pid % per_group % group_m;
    tn = pid % per_group / group_m;
  }
  const int m0 = tm * BM, b0 = tn * BN;
  const int s_begin = kGridSlices ? int(blockIdx.y) : 0, s_count = kGridSlices ? 1 : p.slices;
  const int tiles_per_slice = (p.slice_len + BK - 1) / BK;
  const int num_tiles = s_count * tiles_per_slice;

  // Each thread copies the same (row, chunk) cells of every stage: resolve their sources once.
  const T* a_row[kAChunks];
  const T* b_row[kBChunks];
  int a_cell[kAChunks], b_cell[kBChunks], a_col[kAChunks], b_col[kBChunks];
#pragma unroll
  for (int j = 0; j < kAChunks; ++j) {
    const int i = threadIdx.x + j * C::kThreads, row = i / kChunks, c = i % kChunks;
    a_cell[j] = swizzle<BK>(row, c);
    a_col[j] = c * 8;
    a_row[j] = m0 + row < p.m ? static_cast<const T*>(p.a) + (m0 + row) * p.lda : nullptr;
  }
#pragma unroll
  for (int j = 0; j < kBChunks; ++j) {
    const int i = threadIdx.x + j * C::kThreads, row = i / kChunks, c = i % kChunks;
    b_cell[j] = swizzle<BK>(row, c);
    b_col[j] = c * 8;
    int n;
    const T* w;
    if constexpr (kSwiGLU) {
      constexpr int kHalf = C::WTN / 2;
      const int wn = row / C::WTN, r = row % C::WTN;
      w = static_cast<const T*>(r < kHalf ? p.w0 : p.w1);
      n = tn * (BN / 2) + wn * kHalf + r % kHalf;
    } else {
      w = static_cast<const T*>(p.w0);
      n = b0 + row;
    }
    b_row[j] = n < p.n ? w + int64_t(n) * p.k : nullptr;
  }
  auto tile_k = [&](int t) {
    return (s_begin + t / tiles_per_slice) * p.slice_len + t % tiles_per_slice * BK;
  };
  auto load_a = [&](int stage, int t) {
    T* dst = smem + stage * (BM + BN) * BK;
    const int k0 = tile_k(t);
#pragma unroll
    for (int j = 0; j < kAChunks; ++j) {
      const bool ok = a_row[j] && k0 + a_col[j] < p.k;
      cp_async16(dst + a_cell[j], ok ? a_row[j] + k0 + a_col[j] : p.a, ok);
    }
  };
  auto load_b = [&](int stage, int t) {
    T* dst = smem + stage * (BM + BN) * BK + BM * BK;
    const int k0 = tile_k(t);
#pragma unroll
    for (int j = 0; j < kBChunks; ++j) {
      const bool ok = b_row[j] && k0 + b_col[j] < p.k;
      cp_async16(dst + b_cell[j], ok ? b_row[j] + k0 + b_col[j] : p.w0, ok);
    }
  };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / C::WN, wn = warp % C::WN;
  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;

  // `steps` k16 steps of the tile in `stage`, in ascending order.
  auto compute = [&](int stage, int steps) {
    const T* as = smem + stage * (BM + BN) * BK;
    const T* bs = as + BM * BK;
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      if (kk < steps) {
        uint32_t af[MT][4], bf[NT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          ldmatrix_x4(af[mt],
                      as + swizzle<BK>(wm * C::WTM + mt * 16 + (lane & 15), 2 * kk + (lane >> 4)));
        if constexpr (NT == 1) {
          ldmatrix_x2(bf[0],
                      bs + swizzle<BK>(wn * C::WTN + (lane & 7), 2 * kk + ((lane >> 3) & 1)));
        } else {
#pragma unroll
          for (int np = 0; np < NT / 2; ++np) {
            uint32_t r[4];
            ldmatrix_x4(r, bs + swizzle<BK>(wn * C::WTN + np * 16 + (lane & 7) + (lane >> 4) * 8,
                                            2 * kk + ((lane >> 3) & 1)));
            bf[2 * np][0] = r[0];
            bf[2 * np][1] = r[1];
            bf[2 * np + 1][0] = r[2];
            bf[2 * np + 1][1] = r[3];
          }
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mma_16816<T>(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
      }
    }
  };

  // Slices walked inside the block: each slice's accumulators are added to per-thread totals
  // (thread-major, so the accesses are conflict-free) and restart from zero.
  float* totals = reinterpret_cast<float*>(smem_raw + C::kPipelineBytes);
  const bool fold_slices = !kGridSlices && p.slices > 1;
  auto fold = [&](bool first) {
    int i = 0;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e, ++i) {
          float& t = totals[i * C::kThreads + threadIdx.x];
          t = first ? acc[mt][nt][e] : __fadd_rn(t, acc[mt][nt][e]);
          acc[mt][nt][e] = 0.0f;
        }
  };

  // Pipeline: the weight tiles of the first stages go out before waiting for A's producer.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s)
    if (s < num_tiles) load_b(s, s);
  wait_for_producer();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_tiles) load_a(s, s);
    cp_async_commit();
  }
  for (int t = 0; t < num_tiles; ++t) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile t is visible; the stage refilled below was consumed at t - 1
    const int next = t + kStages - 1;
    if (next < num_tiles) {
      load_a(next % kStages, next);
      load_b(next % kStages, next);
    }
    cp_async_commit();
    const int slice = s_begin + t / tiles_per_slice;
    const int k0 = tile_k(t), k_end = min(k0 + BK, (slice + 1) * p.slice_len);
    compute(t % kStages, (k_end - k0) / 16);
    if (fold_slices && t % tiles_per_slice == tiles_per_slice - 1) fold(t < tiles_per_slice);
  }
  cp_async_wait<0>();

  if (fold_slices) {
    int i = 0;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e, ++i) acc[mt][nt][e] = totals[i * C::kThreads + threadIdx.x];
  }

  if constexpr (kGridSlices) {
    if (p.slices > 1) {
      // Publish this slice's partial; the last block of the tile adds all slices in order.
      __shared__ bool last;
      const int64_t ld = int64_t(p.tiles_n) * BN, rows = int64_t(p.tiles_m) * BM;
      auto cell = [&](int s, int mt, int nt, int h) {
        const int row = m0 + wm * C::WTM + mt * 16 + lane / 4 + 8 * h;
        const int col = b0 + wn * C::WTN + nt * 8 + 2 * (lane % 4);
        return p.partial + (s * rows + row) * ld + col;
      };
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            *reinterpret_cast<float2*>(cell(s_begin, mt, nt, h)) =
                make_float2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
      __threadfence();
      __syncthreads();
      const int tile = tm * p.tiles_n + tn;
      if (threadIdx.x == 0) last = atomicAdd(&p.counters[tile], 1u) == unsigned(p.slices - 1);
      __syncthreads();
      if (!last) return;
      __threadfence();
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            float2 v = __ldcg(reinterpret_cast<const float2*>(cell(0, mt, nt, h)));
            for (int s = 1; s < p.slices; ++s) {
              const float2 w = __ldcg(reinterpret_cast<const float2*>(cell(s, mt, nt, h)));
              v.x = __fadd_rn(v.x, w.x);
              v.y = __fadd_rn(v.y, w.y);
            }
            acc[mt][nt][2 * h] = v.x;
            acc[mt][nt][2 * h + 1] = v.y;
          }
      if (threadIdx.x == 0) p.counters[tile] = 0;  // left zeroed for the next launch
    }
  }

  // Epilogue: the same arithmetic per element in every configuration.
  constexpr int kOutTiles = kSwiGLU ? NT / 2 : NT;
  const int col_base = kSwiGLU ? tn * (BN / 2) + wn * (C::WTN / 2) : b0 + wn * C::WTN;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kOutTiles; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m0 + wm * C::WTM + mt * 16 + lane / 4 + 8 * h;
        const int col = col_base + nt * 8 + 2 * (lane % 4);
        if (row >= p.m || col >= p.n) continue;
        float v0 = acc[mt][nt][2 * h], v1 = acc[mt][nt][2 * h + 1];
        if constexpr (kSwiGLU) {
          v0 = silu_mul(v0, acc[mt][nt + NT / 2][2 * h]);
          v1 = silu_mul(v1, acc[mt][nt + NT / 2][2 * h + 1]);
        } else if (p.bias) {
          v0 = __fadd_rn(v0, p.bias[col]);
          if (col + 1 < p.n) v1 = __fadd_rn(v1, p.bias[col + 1]);
        }
        store_pair<T>(p, row, col, v0, v1);
      }
}

// ---- Host side ----

struct Choice {
  MatmulTiles tiles;
  int bm, bn;  // block tile: rows, weight rows
  bool grid;   // K slices spread over blocks (partials in the workspace)
};

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

constexpr int kSpreadMaxM = 256;  // Medium spreads K slices over blocks up to here

// The tiling for a shape. Any choice gives the same bits; this one is about speed.
Choice choose(int m, int n, int k, bool swiglu, MatmulTiles forced) {
  const int slices = batch_matmul_k_slices(n, k);
  MatmulTiles t = forced;
  if (t == MatmulTiles::Auto) {
    const int64_t large =
        ceil_div(m, LargeTiles::BM) * ceil_div(n, swiglu ? LargeTiles::BN / 2 : LargeTiles::BN);
    if (m <= kSkinnyMaxM)
      t = MatmulTiles::Skinny;
    else if (large >= device_sm_count() * 3 / 4)
      t = MatmulTiles::Large;
    else if (m <= kSpreadMaxM && n < 2048)
      t = MatmulTiles::Skinny;  // few weight rows: streaming them again per 64 rows is cheaper
    else
      t = MatmulTiles::Medium;
  }
  Choice c{t, 0, 0, false};
  if (t == MatmulTiles::Skinny) {
    c.bm = m <= 16 ? 16 : m <= 32 ? 32 : 64;
    c.bn = swiglu ? 64 : 32;
    c.grid = true;
  } else if (t == MatmulTiles::Medium) {
    c.bm = 64;
    c.bn = 128;
    c.grid = m <= kSpreadMaxM && slices > 1;
  } else {
    c.bm = 128;
    c.bn = 256;
  }
  return c;
}

struct Workspace {
  size_t counter_bytes = 0, partial_bytes = 0;
  size_t total() const { return counter_bytes + partial_bytes; }
};

Workspace workspace_for(int m, int n, int k, bool swiglu, MatmulTiles tiles) {
  Workspace w;
  const Choice c = choose(m, n, k, swiglu, tiles);
  const int slices = batch_matmul_k_slices(n, k);
  if (!c.grid || slices == 1) return w;
  const int64_t tiles_m = ceil_div(m, c.bm), tiles_n = ceil_div(n, swiglu ? c.bn / 2 : c.bn);
  w.counter_bytes = kCounterBytes;
  w.partial_bytes = size_t(slices) * tiles_m * c.bm * tiles_n * c.bn * 4;
  return w;
}

template <typename T, typename C, bool kSwiGLU, bool kGridSlices>
void launch(Params p, cudaStream_t stream) {
  auto kernel = matmul_kernel<T, C, kSwiGLU, kGridSlices>;
  // Slices walked in the block need per-thread totals next to the pipeline.
  constexpr size_t kLimit = 227 * 1024, kWithTotals = C::kPipelineBytes + C::kTotalsBytes;
  constexpr bool kCanFold = kGridSlices || kWithTotals <= kLimit;
  constexpr size_t kMaxSmem = kGridSlices || !kCanFold ? C::kPipelineBytes : kWithTotals;
  static_assert(C::kPipelineBytes <= kLimit, "tile configuration exceeds shared memory");
  if (!kCanFold && p.slices > 1)
    throw std::logic_error("batch_matmul: this tiling cannot walk K slices in the block");
  static PerDeviceOnce configured;  // per device: tensor-parallel ranks, any host thread
  configured.run(current_device(), [&] {
    HEARTH_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSmem)));
  });
  p.tiles_m = int(ceil_div(p.m, C::BM));
  p.tiles_n = int(ceil_div(p.n, kSwiGLU ? C::BN / 2 : C::BN));
  if (kGridSlices && p.slices > 1 && int64_t(p.tiles_m) * p.tiles_n > kMaxCounters)
    throw std::invalid_argument("batch_matmul: too many tiles for the slice counters (m " +
                                std::to_string(p.m) + ")");
  const size_t smem = C::kPipelineBytes + (!kGridSlices && p.slices > 1 ? C::kTotalsBytes : 0);
  const dim3 grid(unsigned(p.tiles_m * p.tiles_n), kGridSlices ? p.slices : 1);
  launch_pdl(kernel, grid, dim3(C::kThreads), smem, stream, p);
}

template <typename T, bool kSwiGLU>
void dispatch(const Choice& c, const Params& p, cudaStream_t stream) {
  if (c.tiles == MatmulTiles::Large) {
    if (p.slices > 1) return launch<T, LargeSlicedTiles, kSwiGLU, false>(p, stream);
    return launch<T, LargeTiles, kSwiGLU, false>(p, stream);
  }
  if (c.tiles == MatmulTiles::Medium) {
    if (c.grid) return launch<T, MediumSpreadTiles, kSwiGLU, true>(p, stream);
    return launch<T, MediumTiles, kSwiGLU, false>(p, stream);
  }
  auto skinny = [&](auto bm) {
    constexpr int kBM = decltype(bm)::value;
    launch<T, std::conditional_t<kSwiGLU, SkinnySwigluTiles<kBM>, SkinnyTiles<kBM>>, kSwiGLU, true>(
        p, stream);
  };
  if (c.bm == 16) return skinny(std::integral_constant<int, 16>());
  if (c.bm == 32) return skinny(std::integral_constant<int, 32>());
  skinny(std::integral_constant<int, 64>());
}

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("batch_matmul: " + what);
}

}  // namespace

int batch_matmul_k_slices(int n, int k) {
  // Enough (32-row tile, slice) pieces to cover the GPU when M is small, with slices of at
  // least 512 and a whole number of k16 steps. Depends on the shape alone, never on M.
  const int64_t tiles = ceil_div(n, 32);
  int s = 1;
  while (s < 8 && tiles * s < 512 && k % (32 * s) == 0 && k / (2 * s) >= 512) s *= 2;
  return s;
}

size_t batch_matmul_workspace_bytes(int m, int n, int k, MatmulTiles tiles, bool swiglu) {
  if (wgmma_matmul_available()) return wgmma_matmul_workspace_bytes(m, n, k, swiglu);
  return batch_matmul_mma_workspace_bytes(m, n, k, tiles);
}

size_t batch_matmul_mma_workspace_bytes(int m, int n, int k, MatmulTiles tiles) {
  // Enough for every M' <= m, plain or SwiGLU: partials grow with M' inside a tiling, and
  // Auto spreads slices over blocks only up to kSpreadMaxM rows.
  size_t bytes = 0;
  for (int mm : {std::min(m, kSkinnyMaxM), std::min(m, kSpreadMaxM), m})
    for (bool swiglu : {false, true})
      bytes = std::max(bytes, workspace_for(mm, n, k, swiglu, tiles).total());
  return bytes;
}

void batch_matmul(Half type, MatmulEpilogue epilogue, const MatmulArgs& a, cudaStream_t stream) {
  // Hopper: the wgmma kernel serves every tiling (its own tiles, named after the old ones' jobs).
  if (wgmma_matmul_available()) {
    const WgmmaTiles tiles = a.tiles == MatmulTiles::Skinny   ? WgmmaTiles::M16N32
                             : a.tiles == MatmulTiles::Medium ? WgmmaTiles::M64N128
                             : a.tiles == MatmulTiles::Large  ? WgmmaTiles::M128N256
                                                              : WgmmaTiles::Auto;
    return wgmma_matmul(type, epilogue, a, tiles, stream);
  }
  batch_matmul_mma(type, epilogue, a, stream);
}

void batch_matmul_mma(Half type, MatmulEpilogue epilogue, const MatmulArgs& a,
                      cudaStream_t stream) {
  const bool swiglu = epilogue == MatmulEpilogue::SwiGLU;
  const int64_t lda = checked_matmul_lda("batch_matmul", epilogue, a);
  std::array<MatmulSegment, 3> segments;
  if (const int count = matmul_segments(a, segments); count > 1) {
    // One call per weight: K slices depend on each weight's shape, as for separate calls.
    MatmulArgs one = a;
    one.more = {};
    for (int i = 0; i < count; ++i) {
      one.w = segments[i].w, one.bias = segments[i].bias, one.out = segments[i].out;
      one.n = segments[i].n;
      batch_matmul_mma(type, epilogue, one, stream);
    }
    return;
  }
  const Choice c = choose(a.m, a.n, a.k, swiglu, a.tiles);
  const Workspace ws = workspace_for(a.m, a.n, a.k, swiglu, a.tiles);
  if (ws.total() > 0 && (!a.workspace || a.workspace_bytes < ws.total()))
    fail("workspace of " + std::to_string(a.workspace_bytes) + " bytes, " +
         std::to_string(ws.total()) + " needed (batch_matmul_mma_workspace_bytes)");

  Params p{};
  p.a = a.a;
  p.lda = lda;
  p.w0 = a.w;
  p.w1 = a.w_up;
  p.bias = a.bias;
  p.m = a.m;
  p.n = a.n;
  p.k = a.k;
  p.slices = batch_matmul_k_slices(a.n, a.k);
  p.slice_len = a.k / p.slices;
  p.out = a.out;
  p.counters = static_cast<unsigned*>(a.workspace);
  p.partial = ws.total()
                  ? reinterpret_cast<float*>(static_cast<char*>(a.workspace) + ws.counter_bytes)
                  : nullptr;
  p.epilogue = epilogue;
  HEARTH_DISPATCH_HALF(type, T, {
    if (swiglu)
      dispatch<T, true>(c, p, stream);
    else
      dispatch<T, false>(c, p, stream);
  });
}

}  // namespace hearth::kernels
