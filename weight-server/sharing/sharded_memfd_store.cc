#include "weight-server/sharing/sharded_memfd_store.h"

#include <chrono>
#include <stdexcept>
#include <string>

#include "weight-server/model/parallel_for.h"

namespace hearth {

std::unique_ptr<ShardedMemfdStore> ShardedMemfdStore::create(const HfModel& model,
                                                             const ShardPlan& plan,
                                                             const MemfdLoadOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<ShardedMemfdStore> store(new ShardedMemfdStore);
  store->config_ = model.config();
  store->layout_.plan = plan;
  store->layout_.devices.assign(size_t(plan.ranks()), -1);
  store->layout_.gpu_uuids.assign(size_t(plan.ranks()), "");
  struct Piece {
    const TensorShard* shard;
    const HfTensor* source;
  };
  std::vector<Piece> pieces;
  for (int r = 0; r < plan.ranks(); ++r)
    for (const TensorShard& s : plan.tensors(r)) {
      const HfTensor* source = model.find(s.name);
      if (!source) throw std::logic_error("shard of '" + s.name + "' has no source tensor");
      pieces.push_back({&s, source});
      store->layout_.ranks.push_back(r);
    }
  store->memfds_.resize(pieces.size());
  store->views_.resize(pieces.size());
  parallel_for(pieces.size(), options.threads, [&](size_t i) {
    const auto [shard, source] = pieces[i];
    std::vector<std::byte> bytes(shard_bytes(*shard, dtype_size(source->info.dtype)));
    copy_shard(*shard, dtype_size(source->info.dtype), source->data, bytes);
    const std::string label =
        "hearth:rank" + std::to_string(store->layout_.ranks[i]) + ":" + source->info.name;
    store->memfds_[i] = SealedMemfd::create(label, bytes);
    store->views_[i] = MappedFile::map_fd(store->memfds_[i].fd(), bytes.size(), "memfd " + label);
  });
  uint64_t written = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    TensorInfo info = pieces[i].source->info;
    info.shape = pieces[i].shard->shape;
    info.bytes = store->memfds_[i].size();
    written += info.bytes;
    store->add_tensor(
        StoredTensor{info, store->views_[i].data(), store->memfds_[i].size(), uint32_t(i)});
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  store->timings_ = {written, seconds, seconds};
  return store;
}

UniqueFd ShardedMemfdStore::export_allocation(uint32_t id) const {
  if (id >= memfds_.size())
    throw std::out_of_range("allocation " + std::to_string(id) + " does not exist (the model has " +
                            std::to_string(memfds_.size()) + ")");
  return memfds_[id].duplicate();
}

}  // namespace hearth
