// The persistent grid both TMA-fed wgmma matmuls share (kernels/wgmma_matmul.cu and
// kernels/fp8_matmul.cu): their shared-memory ring of K stages, the order blocks walk output
// tiles in, and the producer thread's loop that fills the ring. One copy, so the two kernels
// keep the same tile order and the same K order by construction.
#pragma once

#include <cstdint>

#include "kernels/pdl.cuh"
#include "kernels/tma_pipeline.cuh"

namespace hearth::kernels {

// A block's shared memory: the A regions of all stages, then their B regions (a small tile's
// 64-row wgmma reads past its A region into the next ones), then a full and an empty mbarrier
// per stage. C gives kABytes and kBarrierOffset.
struct StageRing {
  uint8_t* a;
  uint8_t* b;
  uint64_t* full;
  uint64_t* empty;
};

// The ring in `smem` (aligned up to 1024 bytes, the swizzle atom). Thread 0 initialises the
// barriers: `full` completes on the producer's one arrival and its TMA bytes, `empty` on
// `releases` arrivals. The caller synchronises the block (or cluster) before using them.
template <typename C, int kStages>
__device__ __forceinline__ StageRing stage_ring(uint8_t* smem, uint32_t releases) {
  uint8_t* base =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem) + 1023) & ~uintptr_t(1023));
  StageRing r{base, base + size_t(C::kABytes) * kStages,
              reinterpret_cast<uint64_t*>(base + C::kBarrierOffset), nullptr};
  r.empty = r.full + kStages;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&r.full[s], 1);
      mbar_init(&r.empty[s], releases);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  return r;
}

// The segment (one weight of a launch over several: q, k and v) of column tile `tile`: the
// segments' tiles are numbered one after another, p.seg[s].tile0 the first of segment s.
template <typename P>
__device__ __forceinline__ const auto& segment_of(const P& p, int tile) {
  int s = 0;
  while (s + 1 < p.segments && tile >= p.seg[s + 1].tile0) ++s;
  return p.seg[s];
}

// Unit `unit` of a tiles_m x tiles_n grid, walked in groups of 8 along M so that neighbouring
// blocks share weight tiles in L2: its row tile tm and column tile tn.
__device__ __forceinline__ void tile_coords(int unit, int tiles_m, int tiles_n, int& tm, int& tn) {
  constexpr int kGroup = 8;
  const int per_group = kGroup * tiles_n, first_m = unit / per_group * kGroup;
  const int group_m = min(tiles_m - first_m, kGroup);
  tm = first_m + unit % per_group % group_m;
  tn = unit % per_group / group_m;
}

// Unit `unit` of a launch whose output tiles are each summed from `slices` consecutive K slices
// (kernels/k_slices.cuh; 1: all of K): the tiles' units are `slices` apart in the walk, so a
// tile's slices run side by side and meet soon. Its tile coordinates and its slice.
struct UnitCoords {
  int tm, tn, slice;
};
__device__ __forceinline__ UnitCoords unit_coords(int unit, int tiles_m, int tiles_n, int slices) {
  UnitCoords c;
  c.slice = unit % slices;
  tile_coords(unit / slices, tiles_m, tiles_n, c.tm, c.tn);
  return c;
}

// The producer thread: over units first, first + step, ... < units and each unit's k_tiles
// stages of its slice in K order (K tile slice * k_tiles + kt), waits until the consumers hand
// stage s back, arms its `full` barrier for kStageBytes and calls load_w(s, k_tile, tn) and
// load_a(s, k_tile, tm). The block's first stages' weights are requested before
// wait_for_producer() (the kernel before does not write them), their A after it.
template <int kStages, int kStageBytes, typename LoadW, typename LoadA>
__device__ __forceinline__ void produce_stages(const StageRing& ring, int first, int step,
                                               int units, int tiles_m, int tiles_n, int k_tiles,
                                               int slices, LoadW&& load_w, LoadA&& load_a) {
  UnitCoords u0{};
  const int pre = first < units ? min(kStages, k_tiles) : 0;
  if (pre) u0 = unit_coords(first, tiles_m, tiles_n, slices);
  for (int s = 0; s < pre; ++s) {
    mbar_expect_tx(&ring.full[s], kStageBytes);
    load_w(s, u0.slice * k_tiles + s, u0.tn);
  }
  wait_for_producer();
  for (int s = 0; s < pre; ++s) load_a(s, u0.slice * k_tiles + s, u0.tm);
  int it = 0;
  for (int unit = first; unit < units; unit += step) {
    const UnitCoords u = unit_coords(unit, tiles_m, tiles_n, slices);
    for (int kt = 0; kt < k_tiles; ++kt, ++it) {
      if (it < pre) continue;
      const int s = it % kStages;
      mbar_wait(&ring.empty[s], ((it / kStages) & 1) ^ 1);
      mbar_expect_tx(&ring.full[s], kStageBytes);
      load_w(s, u.slice * k_tiles + kt, u.tn);
      load_a(s, u.slice * k_tiles + kt, u.tm);
    }
  }
}

}  // namespace hearth::kernels
