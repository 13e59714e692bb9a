// One tensor-parallel rank's weights on its own GPU (issue 26), for a single process driving
// every rank: each tensor of a host RankStore copied into a cudaMalloc'd buffer of its own on
// `device`, a 2-D f32 matrix rounded to bf16 as DeviceStore does (the engine multiplies 16-bit
// matrices). Served workers will import the server's per-GPU pieces instead.
#pragma once

#include <vector>

#include "kernels/device_buffer.h"
#include "weight-server/model/weight_store.h"

namespace hearth {

class DeviceRankStore final : public WeightStore {
 public:
  // `pieces` must be host-resident; `device` is made current for the copies and restored after.
  DeviceRankStore(const WeightStore& pieces, int device);

  Residence residence() const override { return Residence::Device; }
  const char* backend_name() const override { return "cuda-rank"; }
  int device() const { return device_; }
  uint64_t device_bytes() const;

 private:
  int device_;
  std::vector<DeviceBuffer> buffers_;
};

}  // namespace hearth
