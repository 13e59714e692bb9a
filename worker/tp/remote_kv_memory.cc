#include "worker/tp/remote_kv_memory.h"

#include <stdexcept>
#include <string>

namespace hearth {

RemoteKvMemory::RemoteKvMemory(std::shared_ptr<TpProcessGroup> group, int rank,
                               const TpKvState& start, std::chrono::milliseconds timeout)
    : group_(std::move(group)), rank_(rank), state_(start), timeout_(timeout) {}

void RemoteKvMemory::resize(bool grow, int blocks) {
  const nlohmann::json answer = group_->request(rank_, kv_resize_message(grow, blocks), timeout_);
  if (message_type(answer) != "kv")
    throw std::runtime_error("tensor-parallel rank " + std::to_string(rank_) +
                             " answered a KV resize with \"" + message_type(answer) + "\"");
  const TpKvState next = parse_kv_state(answer);
  if (next.block_bytes != state_.block_bytes || next.blocks_per_chunk != state_.blocks_per_chunk)
    throw std::runtime_error("tensor-parallel rank " + std::to_string(rank_) +
                             "'s KV pool changed its block or chunk size");
  state_ = next;
}

int RemoteKvMemory::grow(int blocks) {
  if (blocks <= 0) return 0;
  const int before = state_.blocks;
  resize(true, blocks);
  return state_.blocks - before;
}

int RemoteKvMemory::shrink(int keep) {
  resize(false, keep);
  return state_.blocks;
}

}  // namespace hearth
