// A follower's leased KV pool as the leader sees it (issue 26, ranks as processes on a served
// model, CPU or GPU): the pool lives in the follower's process, leased from the server's budget
// of its rank's device (its GPU on a vmm server, host memory on a memfd one); this side only asks
// it over the channel to grow or shrink (kv_grow, kv_shrink, between steps) and keeps the state it
// answers. The leader's engine sees rank 0's lease and these as one RankedKvMemory, so every rank
// holds the same blocks, as the in-process ranks do. A follower's pool that shares prefix blocks
// (its state names foreign ids) is this side's SharedKv too, each call a kv_share between steps,
// so RankedKvMemory shares rank by rank across processes as it does in one.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "worker/engine/kv_memory.h"
#include "worker/tp/process_group.h"
#include "worker/tp/rank_channel.h"

namespace hearth {

class RemoteKvMemory final : public KvMemory, public SharedKv {
 public:
  // `start` is the follower's state from its ready.
  RemoteKvMemory(std::shared_ptr<TpProcessGroup> group, int rank, const TpKvState& start,
                 std::chrono::milliseconds timeout = std::chrono::milliseconds(60'000));

  // Not in this process: nothing here addresses a follower's blocks.
  std::byte* base() const override { return nullptr; }
  int64_t block_bytes() const override { return state_.block_bytes; }
  int blocks() const override { return state_.blocks; }
  int max_blocks() const override { return state_.max_blocks; }
  int blocks_per_chunk() const override { return state_.blocks_per_chunk; }
  // Throw naming the rank when its follower is gone or fails.
  int grow(int blocks) override;
  int shrink(int keep) override;
  int chunks() const override { return state_.chunks; }
  uint64_t bytes() const override { return state_.bytes; }

  SharedKv* shared() override { return state_.foreign_blocks > 0 ? this : nullptr; }
  int first_foreign_block() const override { return state_.foreign_first; }
  int foreign_capacity() const override { return state_.foreign_blocks; }
  // Each a kv_share to the follower; throw naming the rank when it is gone or fails.
  void set_domain(const BlockKey& domain) override;
  std::vector<int32_t> find(const BlockKey& root, std::span<const SharedKvLink> chain) override;
  std::vector<int32_t> find_at(const BlockKey& root, std::span<const SharedKvLink> chain,
                               std::span<const int32_t> ids) override;
  void release(std::span<const int32_t> foreign) override;
  uint64_t publish(std::span<const SharedKvBlock> blocks) override;
  std::vector<int32_t> withdraw(std::span<const int32_t> own) override;

 private:
  void resize(bool grow, int blocks);
  // Sends a kv_share and returns the follower's kv_shared.
  nlohmann::json share_call(const nlohmann::json& message);

  std::shared_ptr<TpProcessGroup> group_;
  int rank_;
  TpKvState state_;
  std::chrono::milliseconds timeout_;
};

// The leader's side of a group whose ranks lease their pools (CPU or GPU ranks alike): a ready
// hook for TpProcessGroup::start that keeps each follower's pool state from its ready in
// `states` (indexed by rank, sized to the world) and throws naming a rank whose ready carried
// none; then rank 0's own pool and one RemoteKvMemory per follower as one RankedKvMemory.
TpReadyHook collect_kv_states(std::vector<TpKvState>& states);
std::shared_ptr<KvMemory> join_leased_pools(std::shared_ptr<KvMemory> rank0,
                                            const std::shared_ptr<TpProcessGroup>& group,
                                            const std::vector<TpKvState>& states);

}  // namespace hearth
