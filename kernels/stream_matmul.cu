// The streaming decode tile on mma.sync with the operands swapped (see stream_matmul.h for why
// the bits are the wgmma tiles').
//
// One warp is one block: it owns 16 weight rows (SwiGLU: 8 gate rows as the MMA's rows 0-7 and
// the same 8 up rows as rows 8-15, so a gate and its up land in one thread; eight_rows: 8
// weight rows, which the MMA's rows 8-15 read again and the epilogue drops) and the launch's up
// to 8 rows of A, over all of K. It streams both through a ring of kStages stages of 256 K
// columns and sums each k16 step with one m16n8k16 MMA, weight fragment x A fragment, in
// ascending K: one accumulator chain per output. Warps share nothing, so a warp needs no barrier
// but its own. Stages are filled by 16-byte cp.async chunks, XOR-swizzled so that each ldmatrix
// reads 8 rows from 8 bank groups (one bulk copy per row, rows padded, was 1.3-1.9x slower on an
// H200). Rows past the weight's n or past m are zero-filled; they feed only outputs past n or m,
// which are not stored.

#include "kernels/stream_matmul.h"

#include <cuda_runtime.h>

#include <stdexcept>

#include "kernels/cuda_check.h"
#include "kernels/device_scope.h"
#include "kernels/half_utils.cuh"
#include "kernels/matmul_epilogue.cuh"
#include "kernels/mma.cuh"
#include "kernels/pdl.cuh"
#include "kernels/per_device_once.h"
#include "kernels/wgmma_matmul.h"

namespace hearth::kernels {

namespace {

constexpr int kStageK = kStreamStageK;
constexpr int kChunks = kStageK / 8;  // 16-byte chunks a row of a stage holds
constexpr int kWeightRows = 16;       // the MMA's M
constexpr int kRows = 8;              // rows of A: the MMA's N
constexpr int kRowBytes = kStageK * 2;

struct StreamSegment {
  const void* w;
  const void* w_up;  // SwiGLU
  const float* bias;
  void* out;
  int n, tile0;
};

struct StreamParams {
  const void* a;
  int64_t lda;
  StreamSegment seg[3];
  int segments;
  int m, k;
  int slices;  // K slices (wgmma_matmul_k_slices, 1 or 2), summed in the warp
  MatmulEpilogue epilogue;
};

constexpr int kStageBytes = (kWeightRows + kRows) * kRowBytes;
// Weight rows a warp loads (eight_rows: 8, which the MMA's rows 8-15 read again) and its stage.
template <bool kEight>
constexpr int kLoadRows = kEight ? 8 : kWeightRows;
template <bool kEight>
constexpr int kStageBytesOf = (kLoadRows<kEight> + kRows) * kRowBytes;

// Chunk `c` of row `r` of a stage region: 16-byte chunks XORed by the row's low three bits.
__device__ __forceinline__ uint8_t* chunk_at(uint8_t* region, int r, int c) {
  return region + r * kRowBytes + ((c ^ (r & 7)) * 16);
}

template <typename T, int kStages, bool kSwiGLU, bool kEight>
__global__ void __launch_bounds__(32) stream_matmul_kernel(const __grid_constant__ StreamParams p) {
  constexpr int kLoad = kLoadRows<kEight>, kStage = kStageBytesOf<kEight>;
  extern __shared__ __align__(128) uint8_t smem[];
  allow_dependents_early();
  const int lane = threadIdx.x;
  int s = 0;
  while (s + 1 < p.segments && int(blockIdx.x) >= p.seg[s + 1].tile0) ++s;
  const StreamSegment& g = p.seg[s];
  constexpr int kOwnRows = kSwiGLU || kEight ? kWeightRows / 2 : kWeightRows;  // its columns
  const int col0 = (int(blockIdx.x) - g.tile0) * kOwnRows;
  const int k_stages = p.k / kStageK;
  // K halves (wgmma_matmul_k_slices): the first half's sums set aside at its end, the second
  // half's chain started from zero, the two added at the end, as the wgmma tiles add them.
  const int second_half = p.slices > 1 ? k_stages / 2 : k_stages;

  // Weight row r of the tile: its first byte, or null past n.
  auto weight_row = [&](int r) -> const uint8_t* {
    const int row = col0 + (kSwiGLU ? r % kOwnRows : r);
    if (row >= g.n) return nullptr;
    const void* base = kSwiGLU && r >= kOwnRows ? g.w_up : g.w;
    return static_cast<const uint8_t*>(base) + size_t(row) * p.k * 2;
  };
  auto region = [&](int slot) { return smem + size_t(slot) * kStage; };
  static_assert(kChunks == 32, "a row's chunks, one a lane");
  auto load_w = [&](int slot, int kt) {
#pragma unroll
    for (int r = 0; r < kLoad; ++r) {
      const uint8_t* src = weight_row(r);
      cp_async16(chunk_at(region(slot), r, lane),
                 src ? src + size_t(kt) * kRowBytes + lane * 16 : nullptr, src != nullptr);
    }
  };
  auto load_a = [&](int slot, int kt) {
    uint8_t* a_region = region(slot) + kLoad * kRowBytes;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      cp_async16(chunk_at(a_region, r, lane),
                 r < p.m ? static_cast<const uint8_t*>(p.a) + size_t(r) * p.lda * 2 +
                               size_t(kt) * kRowBytes + lane * 16
                         : nullptr,
                 r < p.m);
  };

  // The first stages' weights before waiting for the kernel before (it does not write them),
  // their A after: group 0 holds those weights and stage 0's A, group s stage s's A.
  const int pre = min(kStages - 1, k_stages);
  for (int st = 0; st < pre; ++st) load_w(st, st);
  wait_for_producer();
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < pre) load_a(st, st);
    cp_async_commit();
  }

  // The next stage's copies go out before this one's MMAs: issued after them (all fragments
  // read first, then the copies, then the chain) the tile ran 1.3-1.6x slower on an H200.
  float acc[4] = {}, first_half[4] = {};
  for (int kt = 0; kt < k_stages; ++kt) {
    if (kt == second_half) {
#pragma unroll
      for (int i = 0; i < 4; ++i) first_half[i] = acc[i], acc[i] = 0.0f;
    }
    cp_async_wait<kStages - 2>();
    __syncwarp();
    const int next = kt + kStages - 1;  // into the slot stage kt - 1 left, read by now
    if (next < k_stages) {
      load_w(next % kStages, next);
      load_a(next % kStages, next);
    }
    cp_async_commit();
    uint8_t* w_region = region(kt % kStages);
    uint8_t* a_region = w_region + kLoad * kRowBytes;
#pragma unroll
    for (int kk = 0; kk < kStageK / 16; ++kk) {
      uint32_t wf[4], af[2];
      ldmatrix_x4(wf, chunk_at(w_region, lane % kLoad, 2 * kk + lane / 16));
      ldmatrix_x2(af, chunk_at(a_region, lane % 8, 2 * kk + (lane / 8) % 2));
      mma_16816<T>(acc, wf, af[0], af[1]);
    }
  }

  if (p.slices > 1) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[i] = __fadd_rn(first_half[i], acc[i]);
  }

  // acc: weight rows lane / 4 ({0, 1}) and lane / 4 + 8 ({2, 3}) of rows of A 2 (lane % 4) +
  // {0, 1}. A column pair (col, col + 1) is two lanes 4 apart; the even one stores it with the
  // unswapped tiles' arithmetic (store_pair).
  const epilogue::StoreTarget target{g.out, g.n, p.epilogue};
  const int own = lane / 4, col = col0 + own;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const float v = kSwiGLU ? epilogue::silu_mul(acc[e], acc[2 + e]) : acc[e];
    const float v_next = __shfl_down_sync(~0u, v, 4);
    const float w = kSwiGLU ? 0.0f : acc[2 + e];  // column col + 8
    const float w_next = __shfl_down_sync(~0u, w, 4);
    const int row = 2 * (lane % 4) + e;
    if (row >= p.m || own % 2 != 0) continue;
    auto store = [&](int c, float v0, float v1) {
      if (c >= g.n) return;
      if (!kSwiGLU && g.bias) {
        v0 = __fadd_rn(v0, g.bias[c]);
        if (c + 1 < g.n) v1 = __fadd_rn(v1, g.bias[c + 1]);
      }
      epilogue::store_pair<T>(target, row, c, v0, v1);
    };
    store(col, v, v_next);
    if (!kSwiGLU && !kEight) store(col + 8, w, w_next);
  }
}

template <typename T, int kStages, bool kSwiGLU, bool kEight>
void launch(const StreamParams& p, int blocks, cudaStream_t stream) {
  constexpr size_t smem = size_t(kStageBytesOf<kEight>) * kStages;
  auto kernel = stream_matmul_kernel<T, kStages, kSwiGLU, kEight>;
  static PerDeviceOnce configured;
  configured.run(current_device(), [&] {
    HEARTH_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  });
  launch_pdl(kernel, dim3(unsigned(blocks)), dim3(32), smem, stream, p);
}

}  // namespace

int stream_matmul_warps(const std::array<int, 3>& widths, bool swiglu, bool eight_rows) {
  const int own = swiglu || eight_rows ? kWeightRows / 2 : kWeightRows;
  int warps = 0;
  for (int n : widths) warps += (n + own - 1) / own;
  return warps;
}

void stream_matmul(Half type, MatmulEpilogue epilogue, const MatmulArgs& a, int64_t lda,
                   const std::array<MatmulSegment, 3>& segs, int segments, bool eight_rows,
                   cudaStream_t stream) {
  static_assert(stream_matmul_fits(kRows, kStageK) && !stream_matmul_fits(kRows + 1, kStageK));
  if (!stream_matmul_fits(a.m, a.k))
    throw std::invalid_argument("stream_matmul: needs m <= 8 and k a multiple of 256");
  const bool swiglu = epilogue == MatmulEpilogue::SwiGLU;
  StreamParams p{};
  p.a = a.a;
  p.lda = lda;
  p.segments = segments;
  p.m = a.m;
  p.k = a.k;
  p.slices = wgmma_matmul_k_slices(a.k);
  p.epilogue = epilogue;
  int blocks = 0;
  for (int s = 0; s < segments; ++s) {
    p.seg[s] = {segs[s].w, swiglu ? a.w_up : nullptr, segs[s].bias, segs[s].out, segs[s].n, blocks};
    blocks += stream_matmul_warps({segs[s].n, 0, 0}, swiglu, eight_rows && !swiglu);
  }
  // Six stages: 72 KB a warp, kStreamWarpsPerSm of them in an SM's 227 KB (eight_rows: 48 KB,
  // kStreamWarpsPerSmEightRows).
  constexpr int kStages = 6;
  static_assert(kStreamWarpsPerSm * kStageBytes * kStages <= 227 * 1024 &&
                    (kStreamWarpsPerSm + 1) * kStageBytes * kStages > 227 * 1024,
                "kStreamWarpsPerSm warps fit an SM");
  static_assert(kStreamWarpsPerSmEightRows * kStageBytesOf<true> * kStages <= 227 * 1024 &&
                    (kStreamWarpsPerSmEightRows + 1) * kStageBytesOf<true> * kStages > 227 * 1024,
                "kStreamWarpsPerSmEightRows warps fit an SM");
  HEARTH_DISPATCH_HALF(type, T, {
    if (swiglu) return launch<T, kStages, true, false>(p, blocks, stream);
    if (eight_rows) return launch<T, kStages, false, true>(p, blocks, stream);
    return launch<T, kStages, false, false>(p, blocks, stream);
  });
}

}  // namespace hearth::kernels
