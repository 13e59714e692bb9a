// The `memfd` backend sharded for tensor parallelism (issue 26): every rank's piece of every
// tensor (shard_plan.h) copied into its own sealed memfd, rank 0's pieces first, then rank 1's.
// A worker on rank r imports only its rank's allocations. The bytes are the source's, sliced:
// no dtype change, so a piece's checksum is that of its stored bytes.
#pragma once

#include <memory>
#include <vector>

#include "base/mapped_file.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/model/shard_plan.h"
#include "weight-server/sharing/exportable_store.h"
#include "weight-server/sharing/memfd_store.h"
#include "weight-server/sharing/sealed_memfd.h"

namespace hearth {

class ShardedMemfdStore final : public ExportableStore {
 public:
  static std::unique_ptr<ShardedMemfdStore> create(const HfModel& model, const ShardPlan& plan,
                                                   const MemfdLoadOptions& options);

  Residence residence() const override { return Residence::Host; }
  const char* backend_name() const override { return "memfd"; }
  size_t allocation_count() const override { return memfds_.size(); }
  UniqueFd export_allocation(uint32_t id) const override;

  const ShardedLayout* sharded() const override { return &layout_; }
  const ShardPlan& plan() const { return layout_.plan; }
  // The rank of tensors()[i]. (find() by name sees only the last rank's piece: use tensors().)
  const std::vector<int>& ranks() const { return layout_.ranks; }

 private:
  ShardedMemfdStore() = default;
  ShardedLayout layout_;
  std::vector<SealedMemfd> memfds_;
  std::vector<MappedFile> views_;
};

}  // namespace hearth
