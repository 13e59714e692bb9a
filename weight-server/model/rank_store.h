// One tensor-parallel rank's weights cut in process from a whole host-resident store: every
// tensor's piece (shard_plan.h) copied into memory of its own. What the CPU engine's in-process
// ranks run on when a single process holds the whole model; a served worker maps the server's
// pieces instead.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "weight-server/model/shard_plan.h"
#include "weight-server/model/weight_store.h"

namespace hearth {

class RankStore final : public WeightStore {
 public:
  // Throws std::runtime_error when `whole` is not host-resident or lacks a tensor of the plan.
  RankStore(const WeightStore& whole, const ShardPlan& plan, int rank);

  Residence residence() const override { return Residence::Host; }
  const char* backend_name() const override { return "host"; }
  int rank() const { return rank_; }

 private:
  int rank_;
  std::vector<std::unique_ptr<std::byte[]>> buffers_;
};

}  // namespace hearth
