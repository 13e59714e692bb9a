// A follower's leased KV pool as the leader sees it (issue 26, GPU ranks as processes on a
// served model): the pool lives in the follower's process, leased from the server on its GPU;
// this side only asks it over the channel to grow or shrink (kv_grow, kv_shrink, between steps)
// and keeps the state it answers. The leader's engine sees rank 0's lease and these as one
// RankedKvMemory, so every rank holds the same blocks, as the in-process ranks do.
#pragma once

#include <chrono>
#include <memory>

#include "worker/engine/kv_memory.h"
#include "worker/tp/process_group.h"
#include "worker/tp/rank_channel.h"

namespace hearth {

class RemoteKvMemory final : public KvMemory {
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

 private:
  void resize(bool grow, int blocks);

  std::shared_ptr<TpProcessGroup> group_;
  int rank_;
  TpKvState state_;
  std::chrono::milliseconds timeout_;
};

}  // namespace hearth
