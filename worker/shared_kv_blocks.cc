#include "worker/shared_kv_blocks.h"

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>

#include "ipc/errors.h"
#include "weight-server/sharing/kv_chunk.h"

namespace hearth {

SharedKvBlocks::SharedKvBlocks(std::shared_ptr<ipc::Client> server, ipc::WireKey domain,
                               int64_t block_bytes, int max_chunks)
    : server_(std::move(server)),
      domain_(domain),
      block_bytes_(block_bytes),
      max_chunks_(max_chunks) {
  if (!server_ || block_bytes <= 0 || max_chunks <= 0)
    throw std::invalid_argument("shared KV blocks need a server, a block size and chunks");
  chunk_bytes_ = kv_chunk_bytes_for(uint64_t(block_bytes));
  own_range_ = reserve_memfd_kv_range(uint64_t(max_chunks) * chunk_bytes_);
  range_ = own_range_.get();
  slot_taken_.assign(size_t(max_chunks), false);
}

SharedKvBlocks::SharedKvBlocks(std::shared_ptr<ipc::Client> server, ipc::WireKey domain,
                               int64_t block_bytes, int max_chunks, KvChunkRange& range,
                               uint64_t first_offset)
    : server_(std::move(server)),
      domain_(domain),
      block_bytes_(block_bytes),
      max_chunks_(max_chunks),
      range_(&range),
      first_offset_(first_offset) {
  if (!server_ || block_bytes <= 0 || max_chunks <= 0)
    throw std::invalid_argument("shared KV blocks need a server, a block size and chunks");
  chunk_bytes_ = kv_chunk_bytes_for(uint64_t(block_bytes));
  slot_taken_.assign(size_t(max_chunks), false);
}

SharedKvBlocks::~SharedKvBlocks() {
  // Unmapped first; the references go back now, or with the connection if the server is gone.
  if (own_range_) {
    own_range_.reset();
  } else {
    for (const auto& [id, mapped] : slots_) {
      try {
        range_->unmap(first_offset_ + uint64_t(mapped.slot) * chunk_bytes_, chunk_bytes_);
      } catch (const std::exception&) {
      }
    }
  }
  if (held_.empty() || !server_->connected()) return;
  std::vector<ipc::WirePlace> places;
  for (const auto& [place, count] : held_)
    for (uint64_t i = 0; i < count; ++i) places.push_back({place.first, place.second});
  try {
    for (size_t at = 0; at < places.size(); at += ipc::kMaxKvShareBlocks) {
      const size_t n = std::min(ipc::kMaxKvShareBlocks, places.size() - at);
      server_->call(ipc::op::kKvUnref, ipc::make_kv_places_args(std::span(places).subspan(at, n)));
    }
  } catch (const std::exception&) {
  }
}

uint64_t SharedKvBlocks::publish(std::span<const ipc::KvPublishBlock> blocks) {
  uint64_t published = 0;
  for (size_t at = 0; at < blocks.size(); at += ipc::kMaxKvShareBlocks) {
    ipc::KvPublishRequest request{domain_, uint64_t(block_bytes_), {}};
    const size_t n = std::min(ipc::kMaxKvShareBlocks, blocks.size() - at);
    request.blocks.assign(blocks.begin() + long(at), blocks.begin() + long(at + n));
    const ipc::Frame reply = server_->call(ipc::op::kKvPublish, ipc::make_kv_publish_args(request));
    published += reply.body.value("published", uint64_t(0));
  }
  return published;
}

std::vector<SharedKvBlocks::Found> SharedKvBlocks::lookup(
    const ipc::WireKey& root, std::span<const ipc::KvLookupLink> chain,
    const std::function<bool(uint64_t)>& is_own, const SlotChoice& choose) {
  if (chain.empty()) return {};
  if (chain.size() > ipc::kMaxKvShareBlocks) chain = chain.first(ipc::kMaxKvShareBlocks);
  ipc::KvLookupRequest request{domain_, uint64_t(block_bytes_), root, {}, {}};
  request.chain.assign(chain.begin(), chain.end());
  // Chunks mapped here already: the server sends no descriptor for them. (Not the caller's own:
  // a pool may hold more chunks than a message may name; their descriptors are just dropped.)
  request.mapped = mapped_to_name();
  ipc::Frame reply = server_->call(ipc::op::kKvLookup, ipc::make_kv_lookup_args(request));
  ++lookups_;
  ipc::KvLookupReply found_reply;
  try {
    found_reply = ipc::parse_kv_lookup_reply(reply.body, reply.fds.size(), chain.size());
  } catch (const ipc::ProtocolError& e) {
    throw std::runtime_error(std::string("the server's KV lookup reply does not match what was "
                                         "asked: ") +
                             e.what());
  }
  const std::vector<ipc::WirePlace>& places = found_reply.places;
  const std::vector<uint64_t>& chunks = found_reply.chunks;
  const std::vector<uint64_t>& sizes = found_reply.chunk_bytes;
  // The references are ours from here: count them, and give them all back if this lookup
  // cannot finish (a chunk of the wrong size, a mapping the range or the driver refuses), since
  // the caller then has nothing to release.
  for (const ipc::WirePlace& place : places) ++held_[{place.chunk, place.offset}];
  references_ += places.size();
  std::vector<Found> found;
  try {
    std::map<uint64_t, size_t> passed;  // chunk id -> its descriptor's index in the reply
    for (size_t i = 0; i < chunks.size(); ++i) {
      const uint64_t id = chunks[i];
      if (sizes[i] != chunk_bytes_ || passed.contains(id))
        throw std::runtime_error("the server's KV lookup passed chunk " + std::to_string(id) +
                                 " of an unexpected size, or twice");
      passed.emplace(id, i);
    }
    // The run stops at the first block this worker cannot read: a chunk with no room or slot
    // for it, or one the server did not pass (a reply cut at a frame's worth).
    for (size_t i = 0; i < places.size(); ++i) {
      const ipc::WirePlace& place = places[i];
      if (place.offset % uint64_t(block_bytes_) != 0 || place.offset >= chunk_bytes_) break;
      if (is_own && is_own(place.chunk)) {
        found.push_back({place, nullptr});
        continue;
      }
      auto slot = slots_.find(place.chunk);
      if (slot == slots_.end()) {
        const auto fd = passed.find(place.chunk);
        if (fd == passed.end()) break;
        int s = choose ? choose(place, i) : kNextSlot;
        if (s == kNextSlot) s = free_slot();
        if (s < 0 || s >= max_chunks_ || slot_taken_[size_t(s)]) break;
        range_->map_read_only(first_offset_ + uint64_t(s) * chunk_bytes_,
                              reply.fds[fd->second].get(), chunk_bytes_,
                              "shared KV chunk " + std::to_string(place.chunk));
        slot_taken_[size_t(s)] = true;
        slot = slots_.emplace(place.chunk, Mapped{s}).first;
        ++chunk_maps_;
      }
      slot->second.last_use = lookups_;
      found.push_back({place, range_->base() + first_offset_ +
                                  uint64_t(slot->second.slot) * chunk_bytes_ + place.offset});
    }
  } catch (const std::exception&) {
    try {
      unref(places);
    } catch (const std::exception&) {
      // The server is gone: the references went with the connection.
    }
    throw;
  }
  if (found.size() < places.size()) unref(std::span(places).subspan(found.size()));
  return found;
}

std::vector<uint64_t> SharedKvBlocks::mapped_to_name() const {
  std::vector<uint64_t> named;
  if (slots_.size() <= mapped_named_at_most_) {
    for (const auto& [id, mapped] : slots_) named.push_back(id);
    return named;
  }
  std::vector<std::pair<uint64_t, uint64_t>> by_use;  // (last use, chunk), most recent first
  by_use.reserve(slots_.size());
  for (const auto& [id, mapped] : slots_) by_use.emplace_back(mapped.last_use, id);
  std::ranges::nth_element(by_use, by_use.begin() + long(mapped_named_at_most_), std::greater<>());
  for (size_t i = 0; i < mapped_named_at_most_; ++i) named.push_back(by_use[i].second);
  return named;
}

int SharedKvBlocks::free_slot() const {
  for (size_t s = 0; s < slot_taken_.size(); ++s)
    if (!slot_taken_[s]) return int(s);
  return kNoSlot;
}

void SharedKvBlocks::unref(std::span<const ipc::WirePlace> places) {
  if (places.empty()) return;
  for (size_t at = 0; at < places.size(); at += ipc::kMaxKvShareBlocks) {
    const size_t n = std::min(ipc::kMaxKvShareBlocks, places.size() - at);
    server_->call(ipc::op::kKvUnref, ipc::make_kv_places_args(places.subspan(at, n)));
  }
  std::vector<uint64_t> touched;
  for (const ipc::WirePlace& place : places) {
    auto it = held_.find({place.chunk, place.offset});
    if (it != held_.end() && --it->second == 0) held_.erase(it);
    --references_;
    if (touched.empty() || touched.back() != place.chunk) touched.push_back(place.chunk);
  }
  unmap_unreferenced(touched);
}

void SharedKvBlocks::unmap_unreferenced(const std::vector<uint64_t>& chunks) {
  for (uint64_t chunk : chunks) {
    const auto mapped = slots_.find(chunk);
    if (mapped == slots_.end()) continue;  // own, or unmapped already
    const auto held = held_.lower_bound({chunk, 0});
    if (held != held_.end() && held->first.first == chunk) continue;
    range_->unmap(first_offset_ + uint64_t(mapped->second.slot) * chunk_bytes_, chunk_bytes_);
    slot_taken_[size_t(mapped->second.slot)] = false;
    slots_.erase(mapped);
    ++chunk_unmaps_;
  }
}

std::vector<size_t> SharedKvBlocks::withdraw(std::span<const ipc::WirePlace> places) {
  std::vector<size_t> free_to_write;
  if (places.empty()) return free_to_write;
  const ipc::Frame reply = server_->call(ipc::op::kKvWithdraw, ipc::make_kv_places_args(places));
  for (const nlohmann::json& index : reply.body.at("withdrawn")) {
    const size_t i = index.get<size_t>();
    if (i >= places.size()) throw std::runtime_error("the server withdrew a block not asked for");
    free_to_write.push_back(i);
  }
  return free_to_write;
}

}  // namespace hearth
