// What both paged attention kernels (mma.sync in paged_attention.cu, wgmma in
// paged_attention_wgmma.cu) share so that a row gets the same arithmetic from either: the key
// tile and split grid, the kernel parameters, and the merge of split states.
#pragma once

#include <cuda_runtime.h>

#include "kernels/batch_ops.h"

namespace hearth::kernels::paged {

constexpr int kKeys = 64;  // keys per tile
constexpr int kSplit = kAttentionSplitTokens;
constexpr int kTilesPerSplit = kSplit / kKeys;
static_assert(kSplit % kKeys == 0);
// Rows of a sequence that fit one 64-row group may have their splits spread over blocks.
constexpr int kSpreadRows = 64;

struct Params {
  PagedAttentionArgs a;
  int group, q_dim;
  const int* header;   // [0]: items, [1]: merges
  const int4* items;   // {seq, first row, split (-1: all, in order), partial base}
  const int2* merges;  // {seq, partial base}
  float* partials;     // entries of head_dim + 2 floats: o[head_dim], m, l
};

// State (m, l, o) of a row after split j merged into the state of splits 0..j-1: m in log2
// units, l the sum of exp2(s - m), o the unnormalised output.
__device__ __forceinline__ void merge_factors(float m_state, float m_split, float& m, float& a,
                                              float& b) {
  m = fmaxf(m_state, m_split);
  a = exp2f(__fsub_rn(m_state, m));
  b = exp2f(__fsub_rn(m_split, m));
}
__device__ __forceinline__ float merge_value(float state, float a, float split, float b) {
  return __fmaf_rn(state, a, __fmul_rn(split, b));
}

// The wgmma kernel (sm_90a object): items of kWgmmaItemRows rows, `grid` of them at most.
constexpr int kWgmmaItemRows = 128;
bool wgmma_available();
void launch_wgmma(Half type, const Params& p, int grid, cudaStream_t stream);
// paged_attention_tma_tiles for args whose block_stride is the one the kernels step by.
bool tma_tiles(const PagedAttentionArgs& a);

}  // namespace hearth::kernels::paged
