#include "worker/tp/remote_kv_memory.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "worker/engine/ranked_kv_memory.h"

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

nlohmann::json RemoteKvMemory::share_call(const nlohmann::json& message) {
  nlohmann::json answer = group_->request(rank_, message, timeout_);
  if (message_type(answer) != "kv_shared")
    throw std::runtime_error("tensor-parallel rank " + std::to_string(rank_) +
                             " answered a kv_share with \"" + message_type(answer) + "\"");
  return answer;
}

void RemoteKvMemory::set_domain(const BlockKey& domain) {
  share_call(kv_share_domain_message(domain));
}

std::vector<int32_t> RemoteKvMemory::find(const BlockKey& root,
                                          std::span<const SharedKvLink> chain) {
  return parse_kv_shared_ids(share_call(kv_share_find_message(root, chain, {})));
}

std::vector<int32_t> RemoteKvMemory::find_at(const BlockKey& root,
                                             std::span<const SharedKvLink> chain,
                                             std::span<const int32_t> ids) {
  std::vector<int32_t> found =
      parse_kv_shared_ids(share_call(kv_share_find_message(root, chain, ids)));
  // What find_at promises: a prefix of the ids asked for.
  if (found.size() > ids.size() || !std::equal(found.begin(), found.end(), ids.begin()))
    throw std::runtime_error("tensor-parallel rank " + std::to_string(rank_) +
                             " found shared blocks at other ids than rank 0's");
  return found;
}

void RemoteKvMemory::release(std::span<const int32_t> foreign) {
  share_call(kv_share_release_message(foreign));
}

uint64_t RemoteKvMemory::publish(std::span<const SharedKvBlock> blocks) {
  return parse_kv_shared_count(share_call(kv_share_publish_message(blocks)));
}

std::vector<int32_t> RemoteKvMemory::withdraw(std::span<const int32_t> own) {
  return parse_kv_shared_ids(share_call(kv_share_withdraw_message(own)));
}

TpReadyHook collect_kv_states(std::vector<TpKvState>& states) {
  return [&states](int rank, const nlohmann::json& ready) {
    const auto kv = ready.find("kv");
    if (kv == ready.end())
      throw std::runtime_error("tensor-parallel rank " + std::to_string(rank) +
                               "'s ready carried no leased KV pool");
    states.at(size_t(rank)) = parse_kv_state(*kv);
  };
}

std::shared_ptr<KvMemory> join_leased_pools(std::shared_ptr<KvMemory> rank0,
                                            const std::shared_ptr<TpProcessGroup>& group,
                                            const std::vector<TpKvState>& states) {
  std::vector<std::shared_ptr<KvMemory>> pools{std::move(rank0)};
  for (int r = 1; r < group->world_size(); ++r)
    pools.push_back(std::make_shared<RemoteKvMemory>(group, r, states.at(size_t(r))));
  return std::make_shared<RankedKvMemory>(std::move(pools));
}

}  // namespace hearth
