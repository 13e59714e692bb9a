// A weight store whose allocations a server hands to other processes as file descriptors: the
// server side of the `memfd` and `vmm` backends. Allocation ids are indices into the store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "weight-server/model/shard_plan.h"
#include "weight-server/model/weight_store.h"

namespace hearth {

// How long putting a model's weights into their allocations took.
struct LoadTimings {
  uint64_t bytes = 0;       // bytes written into allocations
  double seconds = 0;       // allocating and writing, the whole load
  double copy_seconds = 0;  // the copy itself (for vmm: the host-to-device transfer)
};

// A store sharded for tensor parallelism (shard_plan.h): the rank of tensors()[i], and per rank
// its device and the device's UUID (-1 and "" for host memory).
struct ShardedLayout {
  ShardPlan plan;
  std::vector<int> ranks;
  std::vector<int> devices;
  std::vector<std::string> gpu_uuids;
};

class ExportableStore : public WeightStore {
 public:
  // Null for an unsharded store.
  virtual const ShardedLayout* sharded() const { return nullptr; }
  virtual size_t allocation_count() const = 0;
  // A new descriptor for allocation `id`, owned by the caller (it goes out by SCM_RIGHTS).
  // Throws std::out_of_range for an unknown id, std::runtime_error if exporting fails.
  virtual UniqueFd export_allocation(uint32_t id) const = 0;
  // The device the allocations live on ("" for host memory).
  virtual std::string gpu_uuid() const { return ""; }
  uint64_t allocation_bytes() const {
    uint64_t n = 0;
    for (const StoredTensor& t : tensors()) n += t.alloc_bytes;
    return n;
  }
  const LoadTimings& load_timings() const { return timings_; }

 protected:
  LoadTimings timings_;
};

}  // namespace hearth
