// Row-invariant fp8 matmul with wgmma and TMA (see fp8_matmul.h for why it is invariant).
//
// The pipeline of kernels/wgmma_matmul.cu (a producer warpgroup issuing TMA copies of K stages
// into a ring of 128-byte-swizzled shared-memory stages on full/empty mbarriers; one or two
// consumer warpgroups of 64 rows; a persistent grid walking tiles grouped by 8 along M), with
// three differences: a stage is 128 e4m3 values of K (128 bytes, the same swizzle row), the
// instruction is m64nNk32 e4m3 x e4m3, and each stage's four wgmmas sum into a fresh register
// set that is then added into the fp32 accumulator (promotion: the tensor core's fp8 sums keep
// fewer mantissa bits than fp32). No clusters: the 16-bit kernel's were slower, not faster.
// The pipeline helpers, the tile walk and the producer loop are the 16-bit kernel's
// (kernels/tma_pipeline.cuh, kernels/persistent_tiles.cuh).
// Compiled for sm_90a only; elsewhere the kernel body traps and fp8_matmul_available() is false.
#include "kernels/fp8_matmul.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/device_sm_count.h"
#include "kernels/fp8_support.h"
#include "kernels/device_scope.h"
#include "kernels/per_device_once.h"
#include "kernels/half_utils.cuh"
#include "kernels/matmul_epilogue.cuh"
#include "kernels/matmul_tiling.h"
#include "kernels/pdl.cuh"
#include "kernels/persistent_tiles.cuh"
#include "kernels/tma_pipeline.cuh"
#include "kernels/tma_tensor_map.h"
#include "kernels/wgmma_fp8.cuh"

namespace hearth::kernels {

namespace {

constexpr int kBK = 128;  // K per stage: 128 one-byte codes, one swizzle row
constexpr int kRowBytes = kBK;
constexpr int kStepsPerStage = kBK / 32;

constexpr int kMaxSegments = 3;  // q, k and v

// One weight of the launch (as in wgmma_matmul.cu): its column tiles tile0 .. the next
// segment's tile0 - 1 are its tiles 0, 1, ... of a launch of it alone.
struct Segment {
  CUtensorMap map;  // W (SwiGLU: gate) [n, k], box {128, BN (SwiGLU: BN / 2)}
  const float* w_scale;
  const float* bias;
  void* out;  // [m, n]
  int n, tile0;
};

struct Params {
  CUtensorMap map_a;   // A [m, k], box {128, BM}
  CUtensorMap map_w1;  // SwiGLU: up (one segment only)
  Segment seg[kMaxSegments];
  const float* a_scale;
  const float* w_up_scale;
  int segments;
  int m, k;
  int tiles_m, tiles_n;  // tiles_n: over all segments
  MatmulEpilogue epilogue;
};

using epilogue::silu_mul;
using epilogue::store_pair;
using epilogue::StoreTarget;

// kRows: 16, 32 or 64 with one consumer warpgroup, 128 with two. As in the 16-bit kernel, a
// small tile's 64-row wgmma reads past its A region into the next stages; those rows are never
// stored, and a row's result depends on its own A row only.
//
// kSub: 128-wide K boxes per stage, each summed from zero in its own register set and promoted
// into the accumulator in K order, exactly as kSub stages of one box would be (the same bits).
// A decode tile's block then has kSub independent wgmma chains in flight instead of one or two.
template <int kRows, int kBN, int kStageCount, int kSub = 1>
struct Config {
  static constexpr int kStages = kStageCount, kBoxes = kSub;
  static constexpr int kConsumers = kRows > 64 ? kRows / 64 : 1;
  static constexpr int BM = kRows, BN = kBN, kThreads = 128 * (kConsumers + 1);
  static constexpr int kABoxBytes = BM * kRowBytes, kBBoxBytes = BN * kRowBytes;
  static constexpr int kABytes = kABoxBytes * kSub, kBBytes = kBBoxBytes * kSub;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr size_t kBarrierOffset = size_t(kStageBytes) * kStages;
  static constexpr size_t kSmemBytes = kBarrierOffset + 2 * 8 * kStages + 1024;
  // Two blocks per SM only where both register sets (2 x BN / 2) fit 128 registers a thread.
  static constexpr int kMinBlocks = kConsumers == 1 && kSmemBytes <= 113 * 1024 && BN <= 64 ? 2 : 1;
  static constexpr bool kMoveRegisters = kConsumers == 2;
  // A second stage-sum register set (so one stage's wgmmas overlap the previous promotion)
  // where three sets and ~40 more registers fit the thread's share of the register file. Not
  // with two consumers: at 168 registers ptxas serializes the wgmmas (C7514) instead; there
  // the other consumer's wgmmas fill the gap.
  static constexpr int kRegisterLimit = kMinBlocks == 2 ? 128 : 255;
  static constexpr bool kDoubleBuffer =
      kSub == 1 && kConsumers == 1 && 3 * (BN / 2) + 40 <= kRegisterLimit;
  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0, "swizzle atoms are 1024 bytes");
  static_assert(kRows % 64 == 0 ||
                    size_t(kABytes) * kStages - kABoxBytes + 64 * kRowBytes <= kBarrierOffset,
                "a small tile's 64-row wgmma must stay inside the stages");
};

template <typename T, typename C, bool kSwiGLU>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    fp8_matmul_kernel(const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BM = C::BM, BN = C::BN, kStages = C::kStages;
  extern __shared__ uint8_t smem_raw[];
  const StageRing ring = stage_ring<C, kStages>(smem_raw, C::kConsumers);
  uint8_t* a_smem = ring.a;
  uint8_t* b_smem = ring.b;
  uint64_t* full = ring.full;
  uint64_t* empty = ring.empty;
  __syncthreads();
  allow_dependents_early();

  const int units = p.tiles_m * p.tiles_n;
  constexpr int kSub = C::kBoxes;  // K is a multiple of kSub boxes when kSub > 1 (fp8_matmul)
  const int k_tiles = (p.k + kBK * kSub - 1) / (kBK * kSub);
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    // ---- Producer ----
    if constexpr (C::kMoveRegisters) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      auto load_w = [&](int s, int kt, int tile) {
        const Segment& g = segment_of(p, tile);
        const int tn = tile - g.tile0;  // the column tile within its own weight
        for (int j = 0; j < kSub; ++j) {
          uint8_t* dst = b_smem + size_t(s) * C::kBBytes + size_t(j) * C::kBBoxBytes;
          const int x = (kt * kSub + j) * kBK;
          if constexpr (kSwiGLU) {
            tma_load(dst, &g.map, x, tn * (BN / 2), &full[s]);
            tma_load(dst + (BN / 2) * kRowBytes, &p.map_w1, x, tn * (BN / 2), &full[s]);
          } else {
            tma_load(dst, &g.map, x, tn * BN, &full[s]);
          }
        }
      };
      auto load_a = [&](int s, int kt, int tm) {
        for (int j = 0; j < kSub; ++j)
          tma_load(a_smem + size_t(s) * C::kABytes + size_t(j) * C::kABoxBytes, &p.map_a,
                   (kt * kSub + j) * kBK, tm * BM, &full[s]);
      };
      produce_stages<kStages, C::kStageBytes>(ring, blockIdx.x, gridDim.x, units, p.tiles_m,
                                              p.tiles_n, k_tiles, 1, load_w, load_a);
    }
    __syncwarp();
  } else {
    // ---- Consumers ----
    if constexpr (C::kMoveRegisters) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    wait_for_producer();  // the epilogue reads and writes `out`, which earlier kernels may touch
    const int cw = wg - 1, t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
    float acc[BN / 2], part0[BN / 2], part1[C::kDoubleBuffer ? BN / 2 : 1];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) part0[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < (C::kDoubleBuffer ? BN / 2 : 1); ++i) part1[i] = 0.0f;
    // Stage number `n` (counted over the block's tiles) waits for its data, then its 128
    // products per output are summed by the tensor core from zero into `part`.
    auto issue = [&](auto& part, int n) {
      const int s = n % kStages;
      mbar_wait(&full[s], (n / kStages) & 1);
      const uint32_t a = smem_addr(a_smem + size_t(s) * C::kABytes + (wg - 1) * 64 * kRowBytes);
      const uint32_t b = smem_addr(b_smem + size_t(s) * C::kBBytes);
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) fence_register(part[i]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kStepsPerStage; ++kk)
        WgmmaE4m3<BN>::run(part, smem_desc(a + kk * 32), smem_desc(b + kk * 32), kk > 0);
      wgmma_commit();
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) fence_register(part[i]);
    };
    // Stage `n`'s wgmmas are done: hand the stage back and promote its sums into the fp32
    // accumulator, stages in ascending K order.
    auto promote = [&](auto& part, int n) {
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) fence_register(part[i]);
      if (t == 0) mbar_arrive(&empty[n % kStages]);
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[i] = __fadd_rn(acc[i], part[i]);
    };
    int it = 0;
    for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
      int tm, tile;
      tile_coords(unit, p.tiles_m, p.tiles_n, tm, tile);
      const Segment& g = segment_of(p, tile);
      const int tn = tile - g.tile0;
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
      if constexpr (kSub > 1) {
        // kSub register sets, one per box of the stage: their wgmma chains run side by side;
        // promoted in box order after the stage's wgmmas are done.
        for (int kt = 0; kt < k_tiles; ++kt) {
          const int n = it + kt, s = n % kStages;
          mbar_wait(&full[s], (n / kStages) & 1);
          const uint32_t a0 =
              smem_addr(a_smem + size_t(s) * C::kABytes + (wg - 1) * 64 * kRowBytes);
          const uint32_t b0 = smem_addr(b_smem + size_t(s) * C::kBBytes);
          float parts[kSub][BN / 2];
#pragma unroll
          for (int j = 0; j < kSub; ++j)
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) fence_register(parts[j][i]);
          wgmma_fence();
#pragma unroll
          for (int j = 0; j < kSub; ++j)
#pragma unroll
            for (int kk = 0; kk < kStepsPerStage; ++kk)
              WgmmaE4m3<BN>::run(parts[j], smem_desc(a0 + j * C::kABoxBytes + kk * 32),
                                 smem_desc(b0 + j * C::kBBoxBytes + kk * 32), kk > 0);
          wgmma_commit();
          wgmma_wait<0>();
#pragma unroll
          for (int j = 0; j < kSub; ++j)
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) fence_register(parts[j][i]);
          if (t == 0) mbar_arrive(&empty[s]);
#pragma unroll
          for (int j = 0; j < kSub; ++j)
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) acc[i] = __fadd_rn(acc[i], parts[j][i]);
        }
      } else if constexpr (C::kDoubleBuffer) {
        // Two register sets: a stage's wgmmas run while the one before it is promoted. The
        // additions into acc are the single set's, in the same order: the same bits.
        issue(part0, it);
        int kt = 1;
        for (; kt + 1 < k_tiles; kt += 2) {
          issue(part1, it + kt);
          wgmma_wait<1>();
          promote(part0, it + kt - 1);
          issue(part0, it + kt + 1);
          wgmma_wait<1>();
          promote(part1, it + kt);
        }
        if (kt < k_tiles) {
          issue(part1, it + kt);
          wgmma_wait<1>();
          promote(part0, it + kt - 1);
          wgmma_wait<0>();
          promote(part1, it + kt);
        } else {
          wgmma_wait<0>();
          promote(part0, it + kt - 1);
        }
      } else {
        for (int kt = 0; kt < k_tiles; ++kt) {
          issue(part0, it + kt);
          wgmma_wait<0>();
          promote(part0, it + kt);
        }
      }
      it += k_tiles;

      // Epilogue: out = acc * (a_scale[row] * w_scale[col]), then bias / SwiGLU / store, the
      // same arithmetic per element in every tiling.
      const int local0 = cw * 64 + warp * 16 + lane / 4;
      constexpr int kOutGroups = kSwiGLU ? BN / 16 : BN / 8;
      const int col0 = (kSwiGLU ? tn * (BN / 2) : tn * BN) + 2 * (lane % 4);
#pragma unroll
      for (int j = 0; j < kOutGroups; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int local = local0 + 8 * h, row = tm * BM + local, col = col0 + 8 * j;
          if (local >= BM || row >= p.m || col >= g.n) continue;
          const bool second = col + 1 < g.n;
          const float sx = p.a_scale[row];
          float v0 = __fmul_rn(acc[4 * j + 2 * h], __fmul_rn(sx, g.w_scale[col]));
          float v1 =
              second ? __fmul_rn(acc[4 * j + 2 * h + 1], __fmul_rn(sx, g.w_scale[col + 1])) : 0.0f;
          if constexpr (kSwiGLU) {
            const float u0 =
                __fmul_rn(acc[4 * j + 2 * h + BN / 4], __fmul_rn(sx, p.w_up_scale[col]));
            v0 = silu_mul(v0, u0);
            if (second) {
              const float u1 =
                  __fmul_rn(acc[4 * j + 2 * h + 1 + BN / 4], __fmul_rn(sx, p.w_up_scale[col + 1]));
              v1 = silu_mul(v1, u1);
            }
          } else if (g.bias) {
            v0 = __fadd_rn(v0, g.bias[col]);
            if (second) v1 = __fadd_rn(v1, g.bias[col + 1]);
          }
          store_pair<T>(StoreTarget{g.out, g.n, p.epilogue}, row, col, v0, v1);
        }
    }
  }
#else
  (void)p;
  __trap();
#endif
}

// ---- Host side ----

// A [rows, k] matrix of one-byte codes with rows `ld` bytes apart, read as boxes of 128 x
// box_rows.
CUtensorMap tensor_map(const void* ptr, int rows, int k, int64_t ld, int box_rows) {
  return swizzled_k_major_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, ptr, rows, k, ld, kBK, box_rows,
                              "fp8_matmul");
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

template <typename T, int kRows, int kBN, int kStages, bool kSwiGLU, int kSub = 1>
void launch(const Fp8MatmulArgs& a, int64_t lda, const std::array<Fp8MatmulSegment, 3>& segs,
            Params p, cudaStream_t stream) {
  using C = Config<kRows, kBN, kStages, kSub>;
  static_assert(C::kSmemBytes <= 227 * 1024, "tile configuration exceeds shared memory");
  auto kernel = fp8_matmul_kernel<T, C, kSwiGLU>;
  static PerDeviceOnce configured;  // per device: tensor-parallel ranks, any host thread
  configured.run(current_device(), [&] {
    HEARTH_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(C::kSmemBytes)));
  });
  // The same on every device of one process (they are alike): asked once.
  static const int resident = [&] {
    int n = 0;
    HEARTH_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, C::kThreads, C::kSmemBytes));
    if (n < 1) throw std::runtime_error("fp8_matmul: tile configuration does not fit an SM");
    return n * device_sm_count();
  }();
  const int w_box = kSwiGLU ? kBN / 2 : kBN;
  p.map_a = tensor_map(a.a, a_map_rows(a.m, a.a_rows_readable, kRows), a.k, lda, kRows);
  if (kSwiGLU) p.map_w1 = tensor_map(a.w_up, a.n, a.k, a.k, w_box);
  // Each weight its own descriptor and run of column tiles, numbered as if launched alone.
  int tiles_n = 0;
  for (int s = 0; s < p.segments; ++s) {
    p.seg[s].map = tensor_map(segs[s].w, segs[s].n, a.k, a.k, w_box);
    p.seg[s].tile0 = tiles_n;
    tiles_n += int(ceil_div(segs[s].n, w_box));
  }
  p.tiles_m = int(ceil_div(a.m, kRows));
  p.tiles_n = tiles_n;
  const int64_t units = int64_t(p.tiles_m) * p.tiles_n;
  launch_pdl(kernel, dim3(unsigned(std::min<int64_t>(units, resident))), dim3(C::kThreads),
             C::kSmemBytes, stream, p);
}

template <typename T, bool kSwiGLU>
void dispatch(Fp8Tiles tiles, const Fp8MatmulArgs& a, int64_t lda,
              const std::array<Fp8MatmulSegment, 3>& segs, const Params& p, cudaStream_t stream) {
  // Stage bytes equal the 16-bit kernel's for the same tile (128 bytes of K a row), so the
  // same stage counts: ~100 KB for two blocks per SM, ~190 KB for one.
  switch (tiles) {
    case Fp8Tiles::M16N32:
      return launch<T, 16, 32, 16, kSwiGLU>(a, lda, segs, p, stream);
    case Fp8Tiles::M16N64:
      return launch<T, 16, 64, 10, kSwiGLU>(a, lda, segs, p, stream);
    case Fp8Tiles::M32N32:
      return launch<T, 32, 32, 12, kSwiGLU>(a, lda, segs, p, stream);
    case Fp8Tiles::M32N64:
      return launch<T, 32, 64, 9, kSwiGLU>(a, lda, segs, p, stream);
    case Fp8Tiles::M64N64:
      return launch<T, 64, 64, 6, kSwiGLU>(a, lda, segs, p, stream);
    case Fp8Tiles::M16N32Deep:
      return launch<T, 16, 32, 32, kSwiGLU>(a, lda, segs, p, stream);
    case Fp8Tiles::M16N32DeepK512:
      return launch<T, 16, 32, 8, kSwiGLU, 4>(a, lda, segs, p, stream);
    case Fp8Tiles::M16N48DeepK512:
      return launch<T, 16, 48, 6, kSwiGLU, 4>(a, lda, segs, p, stream);
    case Fp8Tiles::M32N32DeepK512:
      return launch<T, 32, 32, 6, kSwiGLU, 4>(a, lda, segs, p, stream);
    case Fp8Tiles::M32N48DeepK512:
      return launch<T, 32, 48, 5, kSwiGLU, 4>(a, lda, segs, p, stream);
    case Fp8Tiles::M48N32DeepK512:
      return launch<T, 48, 32, 5, kSwiGLU, 4>(a, lda, segs, p, stream);
    case Fp8Tiles::M48N48DeepK512:
      return launch<T, 48, 48, 4, kSwiGLU, 4>(a, lda, segs, p, stream);
    case Fp8Tiles::M64N32DeepK512:
      return launch<T, 64, 32, 4, kSwiGLU, 4>(a, lda, segs, p, stream);
    case Fp8Tiles::M64N48DeepK512:
      return launch<T, 64, 48, 4, kSwiGLU, 4>(a, lda, segs, p, stream);
    case Fp8Tiles::M32N32Deep:
      return launch<T, 32, 32, 24, kSwiGLU>(a, lda, segs, p, stream);
    case Fp8Tiles::M64N32Deep:
      return launch<T, 64, 32, 16, kSwiGLU>(a, lda, segs, p, stream);
    case Fp8Tiles::M64N64Deep:
      return launch<T, 64, 64, 12, kSwiGLU>(a, lda, segs, p, stream);
    case Fp8Tiles::M64N128:
      return launch<T, 64, 128, 8, kSwiGLU>(a, lda, segs, p, stream);
    case Fp8Tiles::M128N64:
      return launch<T, 128, 64, 8, kSwiGLU>(a, lda, segs, p, stream);
    default:
      return launch<T, 128, 128, 6, kSwiGLU>(a, lda, segs, p, stream);
  }
}

// Any choice gives the same bits; this one is about speed (kernels/matmul_tiling.h: the rule
// both wgmma matmuls share). widths: each weight's columns (0 past the last).
Fp8Tiles choose(int m, const std::array<int, kMaxSegments>& widths, int k, bool swiglu) {
  const tiling::LaunchShape shape{m, widths, k, swiglu, 4 * kBK, device_sm_count()};
  switch (tiling::decode_tile(shape)) {
    case tiling::DecodeTile::M16N32DeepFourBoxes:
      return Fp8Tiles::M16N32DeepK512;
    case tiling::DecodeTile::M16N48DeepFourBoxes:
      return Fp8Tiles::M16N48DeepK512;
    case tiling::DecodeTile::M16N24DeepFourBoxes:
      // Narrow shards: no narrower fp8 tile yet; 32 rows fit one wave there too.
      return Fp8Tiles::M16N32DeepK512;
    case tiling::DecodeTile::M16N32Deep:
      return Fp8Tiles::M16N32Deep;
    case tiling::DecodeTile::M16N64:
      return Fp8Tiles::M16N64;
    case tiling::DecodeTile::M16N112:
      // Two 56-wide register sets fit one block an SM only, and 112 weight rows one block an
      // SM measured slower than 64 two (H100, 8B gate/up at one row: 48.3 against 45.7 us).
      return Fp8Tiles::M16N64;
    case tiling::DecodeTile::M16N32:
      return Fp8Tiles::M16N32;
    case tiling::DecodeTile::M32N32Deep:
      return Fp8Tiles::M32N32Deep;
    case tiling::DecodeTile::M32N32:
      return Fp8Tiles::M32N32;
    case tiling::DecodeTile::M32N112:  // as M16N112: 64 wide, two blocks an SM
      return Fp8Tiles::M32N64;
    case tiling::DecodeTile::M64N112:
      return Fp8Tiles::M64N64;
    case tiling::DecodeTile::M64N32Deep:
      return Fp8Tiles::M64N32Deep;
    case tiling::DecodeTile::M64N64Deep:
      return Fp8Tiles::M64N64Deep;
    case tiling::DecodeTile::M64N64:
      return Fp8Tiles::M64N64;
    case tiling::DecodeTile::M32N32DeepFourBoxes:
      return Fp8Tiles::M32N32DeepK512;
    case tiling::DecodeTile::M32N48DeepFourBoxes:
      return Fp8Tiles::M32N48DeepK512;
    case tiling::DecodeTile::M48N32DeepFourBoxes:
      return Fp8Tiles::M48N32DeepK512;
    case tiling::DecodeTile::M48N48DeepFourBoxes:
      return Fp8Tiles::M48N48DeepK512;
    case tiling::DecodeTile::M64N32DeepFourBoxes:
      return Fp8Tiles::M64N32DeepK512;
    case tiling::DecodeTile::M64N48DeepFourBoxes:
      return Fp8Tiles::M64N48DeepK512;
    case tiling::DecodeTile::Large:
      break;
  }
  // Efficiencies as the 16-bit kernel's, not measured for fp8 yet.
  static constexpr tiling::Candidate<Fp8Tiles> kCandidates[] = {
      {Fp8Tiles::M64N64, 64, 64, 2, 0.45},
      {Fp8Tiles::M64N64Deep, 64, 64, 1, 0.4},
      {Fp8Tiles::M64N128, 64, 128, 1, 0.6},
      {Fp8Tiles::M128N64, 128, 64, 1, 0.75},
      {Fp8Tiles::M128N128, 128, 128, 1, 1.0}};
  return tiling::fewest_rounds(shape, kCandidates);
}

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("fp8_matmul: " + what);
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

}  // namespace

const char* fp8_tiles_name(Fp8Tiles t) {
  switch (t) {
    case Fp8Tiles::Auto:
      return "auto";
    case Fp8Tiles::M16N32:
      return "16x32";
    case Fp8Tiles::M16N64:
      return "16x64";
    case Fp8Tiles::M32N32:
      return "32x32";
    case Fp8Tiles::M32N64:
      return "32x64";
    case Fp8Tiles::M64N64:
      return "64x64";
    case Fp8Tiles::M16N32Deep:
      return "16x32deep";
    case Fp8Tiles::M16N32DeepK512:
      return "16x32deep-k512";
    case Fp8Tiles::M16N48DeepK512:
      return "16x48deep-k512";
    case Fp8Tiles::M32N32DeepK512:
      return "32x32deep-k512";
    case Fp8Tiles::M32N48DeepK512:
      return "32x48deep-k512";
    case Fp8Tiles::M48N32DeepK512:
      return "48x32deep-k512";
    case Fp8Tiles::M48N48DeepK512:
      return "48x48deep-k512";
    case Fp8Tiles::M64N32DeepK512:
      return "64x32deep-k512";
    case Fp8Tiles::M64N48DeepK512:
      return "64x48deep-k512";
    case Fp8Tiles::M32N32Deep:
      return "32x32deep";
    case Fp8Tiles::M64N32Deep:
      return "64x32deep";
    case Fp8Tiles::M64N64Deep:
      return "64x64deep";
    case Fp8Tiles::M64N128:
      return "64x128";
    case Fp8Tiles::M128N64:
      return "128x64";
    case Fp8Tiles::M128N128:
      return "128x128";
  }
  return "?";
}

bool fp8_matmul_available() {
  static const bool ok = [] {
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
      return false;
    if (!fp8_matmul_refusal(major, minor).empty()) return false;
    cudaFuncAttributes attr{};
    auto kernel = fp8_matmul_kernel<__nv_bfloat16, Config<16, 32, 16>, false>;
    return cudaFuncGetAttributes(&attr, kernel) == cudaSuccess && attr.binaryVersion == 90;
  }();
  return ok;
}

void require_fp8_matmul() {
  if (fp8_matmul_available()) return;
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    throw std::runtime_error("fp8 weights need a CUDA device, and none is usable");
  const std::string why = fp8_matmul_refusal(major, minor);
  throw std::runtime_error(!why.empty() ? why
                                        : "fp8 weights need the fp8 wgmma matmul, and this build "
                                          "has no sm_90a code for it");
}

void fp8_matmul(Half out_type, MatmulEpilogue epilogue, const Fp8MatmulArgs& a, Fp8Tiles tiles,
                cudaStream_t stream) {
  const bool swiglu = epilogue == MatmulEpilogue::SwiGLU;
  if (a.m < 1 || a.n < 1)
    fail("m and n must be positive (m " + std::to_string(a.m) + ", n " + std::to_string(a.n) + ")");
  if (a.k < 16 || a.k % 16 != 0)
    fail("k must be a positive multiple of 16, not " + std::to_string(a.k));
  const int64_t lda = a.lda ? a.lda : a.k;
  if (lda < a.k || lda % 16 != 0)
    fail("lda (" + std::to_string(lda) + ") must be >= k and a multiple of 16");
  if (!a.a || !a.a_scale || !a.w || !a.w_scale || !a.out)
    fail("a, a_scale, w, w_scale and out are required");
  if (!aligned16(a.a) || !aligned16(a.w) || (a.w_up && !aligned16(a.w_up)))
    fail("a and the weights must be 16-byte aligned");
  if (swiglu && (!a.w_up || !a.w_up_scale)) fail("SwiGLU needs w_up and w_up_scale");
  if (swiglu && a.bias) fail("SwiGLU takes no bias");
  check_a_rows_readable("fp8_matmul", a.a_rows_readable, a.m);
  std::array<Fp8MatmulSegment, 3> segs;
  Params p{};
  segs[p.segments++] = Fp8MatmulSegment{a.w, a.w_scale, a.bias, a.out, a.n};
  for (const Fp8MatmulSegment& s : a.more) {
    if (!s.w) continue;
    if (swiglu) fail("SwiGLU takes one weight pair, not more segments");
    if (s.n < 1 || !s.w_scale || !s.out) fail("a further segment needs n > 0, w_scale and out");
    if (!aligned16(s.w)) fail("a and the weights must be 16-byte aligned");
    segs[p.segments++] = s;
  }
  std::array<int, kMaxSegments> widths{};  // each segment's columns: the tiling is for them all
  for (int s = 0; s < p.segments; ++s) {
    p.seg[s].w_scale = segs[s].w_scale;
    p.seg[s].bias = segs[s].bias;
    p.seg[s].out = segs[s].out;
    p.seg[s].n = segs[s].n;
    widths[s] = segs[s].n;
  }
  if (tiles == Fp8Tiles::Auto) tiles = choose(a.m, widths, a.k, swiglu);
  // Four boxes a stage need K in whole stages (no divergent box check before the wgmmas, which
  // ptxas would serialise). Any tiling gives the same bits.
  if (a.k % (4 * kBK) != 0) {
    if (tiles == Fp8Tiles::M16N32DeepK512 || tiles == Fp8Tiles::M16N48DeepK512)
      tiles = Fp8Tiles::M16N32Deep;
    else if (tiles == Fp8Tiles::M32N32DeepK512 || tiles == Fp8Tiles::M32N48DeepK512)
      tiles = Fp8Tiles::M32N32Deep;
    else if (tiles == Fp8Tiles::M48N32DeepK512 || tiles == Fp8Tiles::M48N48DeepK512 ||
             tiles == Fp8Tiles::M64N32DeepK512 || tiles == Fp8Tiles::M64N48DeepK512)
      tiles = Fp8Tiles::M64N32Deep;
  }
  p.a_scale = a.a_scale;
  p.w_up_scale = a.w_up_scale;
  p.m = a.m;
  p.k = a.k;
  p.epilogue = epilogue;
  HEARTH_DISPATCH_HALF(out_type, T, {
    if (swiglu)
      dispatch<T, true>(tiles, a, lda, segs, p, stream);
    else
      dispatch<T, false>(tiles, a, lda, segs, p, stream);
  });
}

}  // namespace hearth::kernels
