// Row-invariant matmul with wgmma and TMA (see wgmma_matmul.h for why it is invariant).
//
// One persistent kernel template: warpgroup 0 is the producer (one thread issues TMA copies of
// 64-wide K tiles of A and W into a ring of shared-memory stages, 128-byte swizzled, each
// completing on a `full` mbarrier), warpgroups 1..C are consumers (each owns 64 rows of the
// block tile, issues m64nNk16 wgmmas over a stage, and frees it on the stage's `empty` mbarrier
// once its wgmmas have read it). Blocks walk tiles grouped by 8 along M so neighbours share
// weight tiles in L2; the producer runs ahead into the next tile while consumers store.
// Compiled for sm_90a only (kernels/CMakeLists.txt); elsewhere the kernel body traps and
// wgmma_matmul_available() is false.
#include "kernels/wgmma_matmul.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/device_sm_count.h"
#include "kernels/half_utils.cuh"
#include "kernels/mma.cuh"
#include "kernels/pdl.cuh"
#include "kernels/wgmma.cuh"

namespace hearth::kernels {

namespace {

constexpr int kBK = 64;  // K per stage: 128 bytes of 16-bit values, one swizzle row
constexpr int kRowBytes = kBK * 2;

struct Params {
  CUtensorMap map_a;   // A [m, k], box {64, BM}
  CUtensorMap map_w0;  // W (SwiGLU: gate) [n, k], box {64, BN (SwiGLU: BN / 2)}
  CUtensorMap map_w1;  // SwiGLU: up
  const float* bias;
  void* out;
  int m, n, k;
  int tiles_m, tiles_n;
  MatmulEpilogue epilogue;
};

// ---- PTX helpers (sm_90) ----
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
// A 2-D tile {64 along K at x, box rows at y} into dst; completes `bar`'s transaction bytes.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, int x, int y,
                                         uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_addr(bar))
      : "memory");
}
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across wgmma issue and wait.
__device__ __forceinline__ void fence_register(float& r) {
  asm volatile("" : "+f"(r)::"memory");
}
// Shared-memory matrix descriptor: K-major rows of 128 bytes, 128-byte swizzle, 8-row groups
// 1024 bytes apart (the layout TMA writes with CU_TENSOR_MAP_SWIZZLE_128B).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}

__device__ __forceinline__ float silu_mul(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

// Two adjacent outputs (col, col + 1) of one row, with the epilogue's arithmetic.
template <typename T>
__device__ __forceinline__ void store_two(const Params& p, int row, int col, float v0, float v1) {
  const int64_t at = int64_t(row) * p.n + col;
  const bool both = col + 1 < p.n, paired = both && (p.n % 2 == 0);
  if (p.epilogue == MatmulEpilogue::StoreF32 || p.epilogue == MatmulEpilogue::AccumulateF32) {
    float* o = static_cast<float*>(p.out) + at;
    if (p.epilogue == MatmulEpilogue::AccumulateF32) {
      if (paired) {
        const float2 old = *reinterpret_cast<const float2*>(o);
        v0 = __fadd_rn(old.x, v0);
        v1 = __fadd_rn(old.y, v1);
      } else {
        v0 = __fadd_rn(o[0], v0);
        if (both) v1 = __fadd_rn(o[1], v1);
      }
    }
    if (paired) {
      *reinterpret_cast<float2*>(o) = make_float2(v0, v1);
    } else {
      o[0] = v0;
      if (both) o[1] = v1;
    }
  } else {
    T* o = static_cast<T*>(p.out) + at;
    if (paired) {
      *reinterpret_cast<uint32_t*>(o) = pack_half2<T>(v0, v1);
    } else {
      o[0] = HalfTraits<T>::from_float(v0);
      if (both) o[1] = HalfTraits<T>::from_float(v1);
    }
  }
}

template <int kConsumers, int kBN, int kStages>
struct Config {
  static constexpr int BM = 64 * kConsumers, BN = kBN, kThreads = 128 * (kConsumers + 1);
  static constexpr int kStageBytes = (BM + BN) * kRowBytes;
  static constexpr size_t kSmemBytes = size_t(kStageBytes) * kStages + 2 * 8 * kStages + 1024;
  // Two blocks per SM where registers and shared memory allow (small tiles stream weights);
  // one otherwise, with registers moved from the producer to the consumers.
  static constexpr int kMinBlocks = kConsumers == 1 && BN <= 128 ? 2 : 1;
  static constexpr bool kMoveRegisters = kConsumers == 2;
};

__device__ __forceinline__ void tile_coords(const Params& p, int tile, int& tm, int& tn) {
  constexpr int kGroup = 8;
  const int per_group = kGroup * p.tiles_n, first_m = tile / per_group * kGroup;
  const int group_m = min(p.tiles_m - first_m, kGroup);
  tm = first_m + tile % per_group % group_m;
  tn = tile % per_group / group_m;
}

template <typename T, typename C, int kStages, bool kSwiGLU>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    wgmma_matmul_kernel(const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BM = C::BM, BN = C::BN, kStageBytes = C::kStageBytes;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* base =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(base + size_t(kStageBytes) * kStages);
  uint64_t* empty = full + kStages;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], C::kThreads / 128 - 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  allow_dependents_early();

  const int num_tiles = p.tiles_m * p.tiles_n, k_tiles = (p.k + kBK - 1) / kBK;
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    // ---- Producer ----
    if constexpr (C::kMoveRegisters) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x != 0) return;
    auto load_w = [&](int s, int kt, int tn) {
      uint8_t* dst = base + size_t(s) * kStageBytes + BM * kRowBytes;
      if constexpr (kSwiGLU) {
        tma_load(dst, &p.map_w0, kt * kBK, tn * (BN / 2), &full[s]);
        tma_load(dst + (BN / 2) * kRowBytes, &p.map_w1, kt * kBK, tn * (BN / 2), &full[s]);
      } else {
        tma_load(dst, &p.map_w0, kt * kBK, tn * BN, &full[s]);
      }
    };
    auto load_a = [&](int s, int kt, int tm) {
      tma_load(base + size_t(s) * kStageBytes, &p.map_a, kt * kBK, tm * BM, &full[s]);
    };
    // The first stages' weights stream in before waiting for the kernel that wrote A.
    int tm0 = 0, tn0 = 0;
    const int pre = int(blockIdx.x) < num_tiles ? min(kStages, k_tiles) : 0;
    if (pre) tile_coords(p, blockIdx.x, tm0, tn0);
    for (int s = 0; s < pre; ++s) {
      mbar_expect_tx(&full[s], kStageBytes);
      load_w(s, s, tn0);
    }
    wait_for_producer();
    for (int s = 0; s < pre; ++s) load_a(s, s, tm0);
    int it = 0;
    for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
      int tm, tn;
      tile_coords(p, tile, tm, tn);
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {
        if (it < pre) continue;
        const int s = it % kStages;
        mbar_wait(&empty[s], ((it / kStages) & 1) ^ 1);
        mbar_expect_tx(&full[s], kStageBytes);
        load_w(s, kt, tn);
        load_a(s, kt, tm);
      }
    }
    return;
  }

  // ---- Consumers ----
  if constexpr (C::kMoveRegisters) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  wait_for_producer();  // the epilogue reads and writes `out`, which earlier kernels may touch
  const int cw = wg - 1, t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  float acc[BN / 2];
  int it = 0;
  for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
    int tm, tn;
    tile_coords(p, tile, tm, tn);
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    int prev = 0;
    for (int kt = 0; kt < k_tiles; ++kt, ++it) {
      const int s = it % kStages;
      mbar_wait(&full[s], (it / kStages) & 1);
      const uint32_t a = smem_addr(base + size_t(s) * kStageBytes + cw * 64 * kRowBytes);
      const uint32_t b = smem_addr(base + size_t(s) * kStageBytes + BM * kRowBytes);
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) fence_register(acc[i]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk)
        Wgmma<T, BN>::run(acc, smem_desc(a + kk * 32), smem_desc(b + kk * 32), 1);
      wgmma_commit();
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) fence_register(acc[i]);
      if (kt > 0) {
        wgmma_wait<1>();  // the previous stage's wgmmas are done: hand it back
        if (t == 0) mbar_arrive(&empty[prev]);
      }
      prev = s;
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) fence_register(acc[i]);
    if (t == 0) mbar_arrive(&empty[prev]);

    // Epilogue: the same arithmetic per element in every tiling.
    const int row0 = tm * BM + cw * 64 + warp * 16 + lane / 4;
    constexpr int kOutGroups = kSwiGLU ? BN / 16 : BN / 8;
    const int col0 = (kSwiGLU ? tn * (BN / 2) : tn * BN) + 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < kOutGroups; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + 8 * h, col = col0 + 8 * j;
        if (row >= p.m || col >= p.n) continue;
        float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
        if constexpr (kSwiGLU) {
          v0 = silu_mul(v0, acc[4 * j + 2 * h + BN / 4]);
          v1 = silu_mul(v1, acc[4 * j + 2 * h + 1 + BN / 4]);
        } else if (p.bias) {
          v0 = __fadd_rn(v0, p.bias[col]);
          if (col + 1 < p.n) v1 = __fadd_rn(v1, p.bias[col + 1]);
        }
        store_two<T>(p, row, col, v0, v1);
      }
  }
#else
  (void)p;
  __trap();
#endif
}

// ---- Host side ----

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_tiled() {
  static EncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult status{};
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                                             cudaEnableDefault, &status);
    if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || !f)
      throw std::runtime_error("wgmma_matmul: cuTensorMapEncodeTiled is unavailable");
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

// A [rows, k] 16-bit matrix with rows `ld` elements apart, read as boxes of 64 x box_rows.
CUtensorMap tensor_map(Half type, const void* ptr, int rows, int k, int64_t ld, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(ld) * 2};
  const cuuint32_t box[2] = {cuuint32_t(kBK), cuuint32_t(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode_tiled()(
      &map, type == Half::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
      2, const_cast<void*>(ptr), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("wgmma_matmul: cuTensorMapEncodeTiled failed (" + std::to_string(r) +
                             ")");
  return map;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

template <typename T, int kConsumers, int kBN, int kStages, bool kSwiGLU>
void launch(Half type, const MatmulArgs& a, int64_t lda, Params p, cudaStream_t stream) {
  using C = Config<kConsumers, kBN, kStages>;
  static_assert(C::kSmemBytes <= 227 * 1024, "tile configuration exceeds shared memory");
  auto kernel = wgmma_matmul_kernel<T, C, kStages, kSwiGLU>;
  static const int per_sm = [&] {
    HEARTH_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(C::kSmemBytes)));
    int n = 0;
    HEARTH_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, C::kThreads, C::kSmemBytes));
    if (n < 1) throw std::runtime_error("wgmma_matmul: tile configuration does not fit an SM");
    return n;
  }();
  const int w_box = kSwiGLU ? kBN / 2 : kBN;
  p.map_a = tensor_map(type, a.a, a.m, a.k, lda, C::BM);
  p.map_w0 = tensor_map(type, a.w, a.n, a.k, a.k, w_box);
  if (kSwiGLU) p.map_w1 = tensor_map(type, a.w_up, a.n, a.k, a.k, w_box);
  p.tiles_m = int(ceil_div(a.m, C::BM));
  p.tiles_n = int(ceil_div(a.n, w_box));
  const int64_t tiles = int64_t(p.tiles_m) * p.tiles_n;
  const int grid = int(std::min<int64_t>(tiles, int64_t(device_sm_count()) * per_sm));
  launch_pdl(kernel, dim3(grid), dim3(C::kThreads), C::kSmemBytes, stream, p);
}

template <typename T, bool kSwiGLU>
void dispatch(Half type, WgmmaTiles tiles, const MatmulArgs& a, int64_t lda, const Params& p,
              cudaStream_t stream) {
  switch (tiles) {
    case WgmmaTiles::M64N32:
      return launch<T, 1, 32, 8, kSwiGLU>(type, a, lda, p, stream);
    case WgmmaTiles::M64N64:
      return launch<T, 1, 64, 8, kSwiGLU>(type, a, lda, p, stream);
    case WgmmaTiles::M64N128:
      return launch<T, 1, 128, 6, kSwiGLU>(type, a, lda, p, stream);
    case WgmmaTiles::M64N256:
      return launch<T, 1, 256, 5, kSwiGLU>(type, a, lda, p, stream);
    case WgmmaTiles::M128N128:
      return launch<T, 2, 128, 6, kSwiGLU>(type, a, lda, p, stream);
    default:
      return launch<T, 2, 256, 4, kSwiGLU>(type, a, lda, p, stream);
  }
}

// The tiling for a shape: any choice gives the same bits; this one is about speed.
WgmmaTiles choose(int m, int n, bool swiglu) {
  const int64_t outs_per_256 = swiglu ? 128 : 256;
  const int64_t sms = device_sm_count();
  if (m <= 64) {
    // Decode: stream the weights with enough blocks to cover the SMs twice.
    const int64_t w = swiglu ? 2 * int64_t(n) : n;
    return w / 64 >= 2 * sms ? WgmmaTiles::M64N64 : WgmmaTiles::M64N32;
  }
  if (ceil_div(m, 128) * ceil_div(n, outs_per_256) >= sms) return WgmmaTiles::M128N256;
  if (ceil_div(m, 128) * ceil_div(n, outs_per_256 / 2) >= sms) return WgmmaTiles::M128N128;
  return WgmmaTiles::M64N128;
}

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("wgmma_matmul: " + what);
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

}  // namespace

const char* wgmma_tiles_name(WgmmaTiles t) {
  switch (t) {
    case WgmmaTiles::Auto:
      return "auto";
    case WgmmaTiles::M64N32:
      return "64x32";
    case WgmmaTiles::M64N64:
      return "64x64";
    case WgmmaTiles::M64N128:
      return "64x128";
    case WgmmaTiles::M64N256:
      return "64x256";
    case WgmmaTiles::M128N128:
      return "128x128";
    case WgmmaTiles::M128N256:
      return "128x256";
  }
  return "?";
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
    auto kernel = wgmma_matmul_kernel<__nv_bfloat16, Config<1, 32, 8>, 8, false>;
    return cudaFuncGetAttributes(&attr, kernel) == cudaSuccess && attr.binaryVersion == 90;
  }();
  return ok;
}

void wgmma_matmul(Half type, MatmulEpilogue epilogue, const MatmulArgs& a, WgmmaTiles tiles,
                  cudaStream_t stream) {
  const bool swiglu = epilogue == MatmulEpilogue::SwiGLU;
  if (a.m < 1 || a.n < 1)
    fail("m and n must be positive (m " + std::to_string(a.m) + ", n " + std::to_string(a.n) + ")");
  if (a.k < 16 || a.k % 16 != 0)
    fail("k must be a positive multiple of 16, not " + std::to_string(a.k));
  const int64_t lda = a.lda ? a.lda : a.k;
  if (lda < a.k || lda % 8 != 0)
    fail("lda (" + std::to_string(lda) + ") must be >= k and a multiple of 8");
  if (!a.a || !a.w || !a.out) fail("a, w and out are required");
  if (!aligned16(a.a) || !aligned16(a.w) || (a.w_up && !aligned16(a.w_up)))
    fail("a and the weights must be 16-byte aligned");
  if (swiglu && !a.w_up) fail("SwiGLU needs w_up");
  if (swiglu && a.bias) fail("SwiGLU takes no bias");
  if (tiles == WgmmaTiles::Auto) tiles = choose(a.m, a.n, swiglu);
  Params p{};
  p.bias = a.bias;
  p.out = a.out;
  p.m = a.m;
  p.n = a.n;
  p.k = a.k;
  p.epilogue = epilogue;
  HEARTH_DISPATCH_HALF(type, T, {
    if (swiglu)
      dispatch<T, true>(type, tiles, a, lda, p, stream);
    else
      dispatch<T, false>(type, tiles, a, lda, p, stream);
  });
}

}  // namespace hearth::kernels
