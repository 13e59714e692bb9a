#include "weight-server/daemon/kv_share_registry.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace hearth {

void KvShareRegistry::add_chunk(ClientId owner, uint64_t chunk, uint64_t bytes) {
  if (!chunks_.try_emplace(chunk, Chunk{owner, bytes, {}, 0}).second)
    throw std::invalid_argument("KV chunk " + std::to_string(chunk) + " is registered already");
}

bool KvShareRegistry::release_chunk(uint64_t chunk) {
  auto it = chunks_.find(chunk);
  if (it == chunks_.end()) return true;
  if (it->second.offsets.empty()) {
    chunks_.erase(it);
    return true;
  }
  it->second.owner.reset();
  return false;
}

KvShareRegistry::Publish KvShareRegistry::publish(ClientId owner, const KvBlockPlace& place,
                                                  const KvShareBlock& block) {
  auto chunk = chunks_.find(place.chunk);
  if (chunk == chunks_.end() || chunk->second.owner != owner) return Publish::kNotOwner;
  const uint64_t size = block.block_bytes;
  if (size == 0 || place.offset % size != 0 || place.offset >= chunk->second.bytes ||
      chunk->second.bytes - place.offset < size)
    return Publish::kBadPlace;
  if (by_key_.contains(block.key)) return Publish::kDuplicate;
  if (entries_.contains(place)) return Publish::kPlaceTaken;
  const uint64_t now = tick();
  by_key_.emplace(block.key, place);
  entries_.emplace(place, Entry{block, place, {}, now});
  chunk->second.offsets.insert(place.offset);
  chunk->second.last_use = now;
  return Publish::kPublished;
}

std::vector<KvBlockPlace> KvShareRegistry::lookup(ClientId client, const KvShareKey& domain,
                                                  uint64_t block_bytes, const KvShareKey& root,
                                                  std::span<const KvShareLink> chain) {
  std::vector<KvBlockPlace> hits;
  KvShareKey parent = root;
  const uint64_t held = references_of(client);
  const uint64_t room = held < max_references_ ? max_references_ - held : 0;
  for (const KvShareLink& link : chain) {
    if (hits.size() == room) break;
    auto found = by_key_.find(link.key);
    if (found == by_key_.end()) break;
    const KvShareBlock& block = entries_.at(found->second).block;
    // Everything the key stands for must match, so a collision or forgery is only a miss.
    if (block.domain != domain || block.block_bytes != block_bytes || block.parent != parent ||
        !std::ranges::equal(block.tokens, link.tokens))
      break;
    hits.push_back(found->second);
    parent = link.key;
  }
  const uint64_t now = tick();
  for (const KvBlockPlace& place : hits) {
    Entry& entry = entries_.at(place);
    ++entry.refs[client];
    ++refs_by_client_[client][place];
    entry.last_use = now;
    chunks_.at(place.chunk).last_use = now;
  }
  return hits;
}

bool KvShareRegistry::unref(ClientId client, std::span<const KvBlockPlace> places) {
  auto held = refs_by_client_.find(client);
  if (held == refs_by_client_.end()) return places.empty();
  // Check the whole request first: a refused unref changes nothing.
  std::map<KvBlockPlace, uint64_t> wanted;
  for (const KvBlockPlace& place : places) ++wanted[place];
  for (const auto& [place, count] : wanted) {
    auto it = held->second.find(place);
    if (it == held->second.end() || it->second < count) return false;
  }
  for (const auto& [place, count] : wanted) {
    Entry& entry = entries_.at(place);
    if ((entry.refs[client] -= count) == 0) entry.refs.erase(client);
    if ((held->second[place] -= count) == 0) held->second.erase(place);
  }
  if (held->second.empty()) refs_by_client_.erase(held);
  return true;
}

KvShareRegistry::Withdraw KvShareRegistry::withdraw(ClientId owner, const KvBlockPlace& place) {
  auto chunk = chunks_.find(place.chunk);
  Entry* entry = entry_at(place);
  if (chunk == chunks_.end() || chunk->second.owner != owner || entry == nullptr)
    return Withdraw::kNotFound;
  for (const auto& [client, count] : entry->refs)
    if (client != owner && count > 0) return Withdraw::kReferenced;
  unpublish(place);
  return Withdraw::kWithdrawn;
}

void KvShareRegistry::forget(ClientId client) {
  auto held = refs_by_client_.find(client);
  if (held == refs_by_client_.end()) return;
  for (const auto& [place, count] : held->second) entries_.at(place).refs.erase(client);
  refs_by_client_.erase(held);
}

std::vector<uint64_t> KvShareRegistry::evict(uint64_t bytes,
                                             const std::function<bool(uint64_t chunk)>& eligible) {
  std::vector<std::pair<uint64_t, uint64_t>> candidates;  // (last use, chunk)
  for (const auto& [id, chunk] : chunks_) {
    if (chunk.owner || (eligible && !eligible(id))) continue;
    const bool unreferenced = std::ranges::none_of(chunk.offsets, [&](uint64_t offset) {
      return referenced(entries_.at(KvBlockPlace{id, offset}));
    });
    if (unreferenced) candidates.emplace_back(chunk.last_use, id);
  }
  std::ranges::sort(candidates);
  std::vector<uint64_t> evicted;
  uint64_t freed = 0;
  for (const auto& [last_use, id] : candidates) {
    if (!evicted.empty() && freed >= bytes) break;
    const std::set<uint64_t> offsets = chunks_.at(id).offsets;
    for (uint64_t offset : offsets) unpublish(KvBlockPlace{id, offset});
    freed += chunks_.at(id).bytes;
    chunks_.erase(id);
    evicted.push_back(id);
  }
  return evicted;
}

size_t KvShareRegistry::orphaned_chunks() const {
  return size_t(std::ranges::count_if(chunks_, [](const auto& c) { return !c.second.owner; }));
}

uint64_t KvShareRegistry::references_of(ClientId client) const {
  auto held = refs_by_client_.find(client);
  if (held == refs_by_client_.end()) return 0;
  uint64_t total = 0;
  for (const auto& [place, count] : held->second) total += count;
  return total;
}

uint64_t KvShareRegistry::references_at(const KvBlockPlace& place) const {
  auto it = entries_.find(place);
  if (it == entries_.end()) return 0;
  uint64_t total = 0;
  for (const auto& [client, count] : it->second.refs) total += count;
  return total;
}

std::optional<KvShareRegistry::ClientId> KvShareRegistry::owner_of(uint64_t chunk) const {
  auto it = chunks_.find(chunk);
  if (it == chunks_.end()) return std::nullopt;
  return it->second.owner;
}

KvShareRegistry::Entry* KvShareRegistry::entry_at(const KvBlockPlace& place) {
  auto it = entries_.find(place);
  return it == entries_.end() ? nullptr : &it->second;
}

// Removes the block at `place` from every index; its references (if any) go with it.
void KvShareRegistry::unpublish(const KvBlockPlace& place) {
  auto it = entries_.find(place);
  if (it == entries_.end()) return;
  for (const auto& [client, count] : it->second.refs) {
    auto held = refs_by_client_.find(client);
    if (held == refs_by_client_.end()) continue;
    held->second.erase(place);
    if (held->second.empty()) refs_by_client_.erase(held);
  }
  by_key_.erase(it->second.block.key);
  if (auto chunk = chunks_.find(place.chunk); chunk != chunks_.end())
    chunk->second.offsets.erase(place.offset);
  entries_.erase(it);
}

}  // namespace hearth
