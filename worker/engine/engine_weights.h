// The weights an engine runs on: a store, host-mapped or GPU-resident, and in single-process
// runs the model directory it was opened from, which the cuda backend uploads from. Whether
// they came from a weight server or a directory is the worker's business, not the engine's.
#pragma once

#include <memory>
#include <vector>

#include "weight-server/model/hf_model.h"
#include "weight-server/model/weight_store.h"

namespace hearth {

struct EngineWeights {
  std::shared_ptr<const WeightStore> store;
  std::shared_ptr<const HfModel> source;  // null for served weights
  // A model the server sharded for tensor parallelism: each rank's pieces, rank 0's also in
  // `store` (which then holds only them). Empty: unsharded (a TP engine cuts its own pieces).
  std::vector<std::shared_ptr<const WeightStore>> ranks = {};
};

}  // namespace hearth
