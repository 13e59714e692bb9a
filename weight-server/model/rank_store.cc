#include "weight-server/model/rank_store.h"

#include <stdexcept>
#include <string>

namespace hearth {

RankStore::RankStore(const WeightStore& whole, const ShardPlan& plan, int rank) : rank_(rank) {
  if (whole.residence() != Residence::Host)
    throw std::runtime_error("cutting rank " + std::to_string(rank) +
                             "'s weights needs host-resident tensors");
  config_ = whole.config();
  for (const TensorShard& shard : plan.tensors(rank)) {
    const StoredTensor& t = whole.at(shard.name);
    const size_t element = dtype_size(t.info.dtype);
    const uint64_t bytes = shard_bytes(shard, element);
    buffers_.push_back(std::make_unique_for_overwrite<std::byte[]>(bytes));
    copy_shard(shard, element, {static_cast<const std::byte*>(t.data), t.info.bytes},
               {buffers_.back().get(), bytes});
    TensorInfo info = t.info;
    info.shape = shard.shape;
    info.bytes = bytes;
    add_tensor(StoredTensor{info, buffers_.back().get(), bytes, uint32_t(buffers_.size() - 1)});
  }
}

}  // namespace hearth
