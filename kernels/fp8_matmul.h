// The row-invariant fp8 matmul on Hopper (W8A8, the FP8-dynamic scheme; issue 25):
//   out[m, n] = acc[m, n] * (a_scale[m] * w_scale[n]) (+ bias[n]),
//   acc[m, n] = sum_k dec(A[m, k]) * dec(W[n, k])  in fp32,
// A and W e4m3 codes (kernels/fp8_quantize.h makes both), with the epilogues of the 16-bit
// matmuls (kernels/batch_ops.h: fp32 store or accumulate, 16-bit store, SwiGLU of gate and up).
//
// Why every tiling gives the same bits: an output's accumulator lives in one thread; it is fed
// by 128-wide K stages in ascending order from zero, the whole of K (no split). Within a stage
// four m64nNk32 wgmmas sum into a fresh register set (the tensor core's fp8 accumulation keeps
// fewer bits than fp32, so it never carries more than 128 products), which is then added to the
// fp32 accumulator: the same chain for every row count, tile shape and place in the tile.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>

#include "kernels/batch_ops.h"

namespace hearth::kernels {

// Block tiles: rows x weight rows (SwiGLU: half gate, half up), as the 16-bit wgmma matmul's,
// minus those whose two register sets (accumulator and stage sum) would not fit.
enum class Fp8Tiles {
  Auto,
  M16N32,
  M16N64,
  M32N32,
  M64N64,
  M16N32Deep,
  M16N32DeepK512,
  M16N48DeepK512,
  M32N32DeepK512,
  M32N48DeepK512,
  M48N32DeepK512,
  M48N48DeepK512,
  M64N32DeepK512,
  M64N48DeepK512,
  M32N64,
  M32N32Deep,
  M64N32Deep,
  M64N64Deep,
  M64N128,
  M128N64,
  M128N128
};
constexpr Fp8Tiles kAllFp8Tiles[] = {
    Fp8Tiles::M16N32,         Fp8Tiles::M16N64,         Fp8Tiles::M32N32,
    Fp8Tiles::M64N64,         Fp8Tiles::M16N32Deep,     Fp8Tiles::M32N32Deep,
    Fp8Tiles::M64N32Deep,     Fp8Tiles::M64N64Deep,     Fp8Tiles::M64N128,
    Fp8Tiles::M128N64,        Fp8Tiles::M128N128,       Fp8Tiles::M16N32DeepK512,
    Fp8Tiles::M16N48DeepK512, Fp8Tiles::M32N32DeepK512, Fp8Tiles::M32N48DeepK512,
    Fp8Tiles::M64N32DeepK512, Fp8Tiles::M64N48DeepK512, Fp8Tiles::M32N64,
    Fp8Tiles::M48N32DeepK512, Fp8Tiles::M48N48DeepK512};
const char* fp8_tiles_name(Fp8Tiles t);

// A further weight on the same quantized input in the same launch (k and v after q): its codes
// [n, k], row scales [n], optional bias [n] and [m, n] output. As for MatmulSegment, a column
// gets the arithmetic (and bits) of a launch of its weight alone.
struct Fp8MatmulSegment {
  const uint8_t* w = nullptr;
  const float* w_scale = nullptr;
  const float* bias = nullptr;
  void* out = nullptr;
  int n = 0;
};

struct Fp8MatmulArgs {
  const uint8_t* a = nullptr;         // activations [m, k] e4m3, rows `lda` bytes apart
  int64_t lda = 0;                    // 0: k
  const float* a_scale = nullptr;     // [m]
  const uint8_t* w = nullptr;         // weight [n, k] e4m3 (SwiGLU: the gate)
  const float* w_scale = nullptr;     // [n] (a per-tensor scale: repeated n times)
  const uint8_t* w_up = nullptr;      // SwiGLU only: the up weight [n, k]
  const float* w_up_scale = nullptr;  // SwiGLU only: [n]
  const float* bias = nullptr;        // optional [n]
  int m = 0, n = 0, k = 0;            // k: a multiple of 16
  int a_rows_readable = 0;            // rows of `a` that may be read (batch_ops.h's a_map_rows)
  void* out = nullptr;                // [m, n], contiguous: fp32 or `out_type`
  // Weights after w, in order, while their w is set; not with SwiGLU. One launch for all.
  std::array<Fp8MatmulSegment, 2> more{};
};

// True when the current device runs it (compute capability 9.0 and sm_90a code in this build).
bool fp8_matmul_available();
// Throws std::runtime_error saying why (kernels/fp8_support.h) when it is not available.
void require_fp8_matmul();
// out_type: the 16-bit type of StoreHalf and SwiGLU outputs. Requires k % 16 == 0,
// lda % 16 == 0, 16-byte aligned a and weights.
void fp8_matmul(Half out_type, MatmulEpilogue epilogue, const Fp8MatmulArgs& args, Fp8Tiles tiles,
                cudaStream_t stream);

}  // namespace hearth::kernels
