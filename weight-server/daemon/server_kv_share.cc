// The server's side of prefix KV sharing across workers (issue 22 item 3): the kv_publish,
// kv_lookup, kv_unref and kv_withdraw ops over KvShareRegistry, and what happens to a chunk
// with published blocks when its owner gives it up. The messages are described in
// ipc/kv_share_protocol.h.
#include <set>
#include <string>

#include "ipc/errors.h"
#include "ipc/fd_passing.h"
#include "ipc/kv_share_protocol.h"
#include "weight-server/daemon/server_handler.h"

namespace hearth {
namespace {

using json = nlohmann::json;
using broker::Reply;
using ipc::ErrorCode;
using ipc::ProtocolError;

KvShareKey key_of(const ipc::WireKey& key) {
  return {key.low, key.high};
}
KvBlockPlace place_of(const ipc::WirePlace& place) {
  return {place.chunk, place.offset};
}
ipc::WirePlace wire_place(const KvBlockPlace& place) {
  return {place.chunk, place.offset};
}

std::vector<KvBlockPlace> places_of(const ipc::KvPlacesRequest& request) {
  std::vector<KvBlockPlace> places;
  places.reserve(request.places.size());
  for (const ipc::WirePlace& place : request.places) places.push_back(place_of(place));
  return places;
}

}  // namespace

void ServerHandler::give_up_kv_chunk(broker::ClientId owner, uint64_t id) {
  auto it = kv_chunks_.find(id);
  if (it == kv_chunks_.end() || it->second.owner != owner) return;
  if (kv_share_.release_chunk(id)) {
    kv_chunks_.erase(it);
    return;
  }
  // Published blocks live in it: it stays, the server's now, until evicted.
  it->second.owner = kSharedHolder;
  budgets_.at(it->second.device).add(kSharedHolder, it->second.bytes);
}

void ServerHandler::evict_shared_kv(uint64_t bytes, uint64_t device) {
  const auto on_device = [&](uint64_t id) {
    const auto it = kv_chunks_.find(id);
    return it != kv_chunks_.end() && it->second.device == device;
  };
  for (uint64_t id : kv_share_.evict(bytes, on_device)) {
    auto it = kv_chunks_.find(id);
    if (it == kv_chunks_.end()) continue;
    budgets_.at(it->second.device).remove(kSharedHolder, it->second.bytes);
    kv_chunks_.erase(it);
    ++kv_share_evicted_;
  }
}

json ServerHandler::kv_share_stats() const {
  return {{"blocks", kv_share_.blocks()},
          {"orphaned_chunks", kv_share_.orphaned_chunks()},
          {"evicted_chunks_total", kv_share_evicted_}};
}

broker::Reply ServerHandler::kv_publish(broker::Session& session, const ipc::Request& request) {
  const ipc::KvPublishRequest req = ipc::parse_kv_publish_request(request);
  // Every place is checked before anything is published: one forged place refuses them all.
  for (const ipc::KvPublishBlock& block : req.blocks) {
    const uint64_t id = block.place.chunk, offset = block.place.offset;
    if (kv_share_.owner_of(id) != session.id())
      throw ProtocolError(ErrorCode::kNotFound, "this client holds no KV chunk " +
                                                    std::to_string(id) + "; nothing published");
    const uint64_t bytes = kv_chunks_.at(id).bytes;
    if (offset % req.block_bytes != 0 || offset >= bytes || bytes - offset < req.block_bytes)
      throw ProtocolError(ErrorCode::kBadRequest,
                          "offset " + std::to_string(offset) + " is not a whole block of " +
                              std::to_string(req.block_bytes) + " bytes inside KV chunk " +
                              std::to_string(id) + "; nothing published");
  }
  uint64_t published = 0;
  json refused = json::array();
  for (size_t i = 0; i < req.blocks.size(); ++i) {
    const ipc::KvPublishBlock& wire = req.blocks[i];
    const KvShareBlock block{key_of(req.domain), req.block_bytes, key_of(wire.key),
                             key_of(wire.parent), wire.tokens};
    const KvShareRegistry::Publish result =
        kv_share_.publish(session.id(), place_of(wire.place), block);
    if (result == KvShareRegistry::Publish::kPublished)
      ++published;
    else
      refused.push_back(i);
  }
  return Reply::ok({{"published", published}, {"refused", std::move(refused)}});
}

broker::Reply ServerHandler::kv_lookup(broker::Session& session, const ipc::Request& request) {
  const ipc::KvLookupRequest req = ipc::parse_kv_lookup_request(request);
  std::vector<KvShareLink> chain;
  chain.reserve(req.chain.size());
  for (const ipc::KvLookupLink& link : req.chain) chain.push_back({key_of(link.key), link.tokens});
  std::vector<KvBlockPlace> hits =
      kv_share_.lookup(session.id(), key_of(req.domain), req.block_bytes, key_of(req.root), chain);
  // One FD per hit chunk the worker has not mapped yet, at most a frame's worth: a run that
  // needs more is cut there, and the references past the cut go back.
  const std::set<uint64_t> mapped(req.mapped.begin(), req.mapped.end());
  std::vector<uint64_t> chunks;
  std::set<uint64_t> sent;
  size_t kept = 0;
  for (; kept < hits.size(); ++kept) {
    const uint64_t id = hits[kept].chunk;
    if (mapped.contains(id) || sent.contains(id)) continue;
    if (chunks.size() == ipc::kMaxFdsPerFrame) break;
    chunks.push_back(id);
    sent.insert(id);
  }
  if (kept < hits.size()) {
    kv_share_.unref(session.id(), std::span(hits).subspan(kept));
    hits.resize(kept);
  }
  std::vector<UniqueFd> fds;
  std::vector<uint64_t> sizes;
  for (uint64_t id : chunks) {
    const KvChunk& chunk = kv_chunks_.at(id);
    fds.push_back(chunk.memory->export_read_only_fd());
    sizes.push_back(chunk.bytes);
  }
  std::vector<ipc::WirePlace> places;
  places.reserve(hits.size());
  for (const KvBlockPlace& place : hits) places.push_back(wire_place(place));
  return Reply::ok(ipc::make_kv_lookup_reply(places, chunks, sizes), std::move(fds));
}

broker::Reply ServerHandler::kv_unref(broker::Session& session, const ipc::Request& request) {
  const std::vector<KvBlockPlace> places =
      places_of(ipc::parse_kv_places_request(request, /*distinct=*/false));
  if (!kv_share_.unref(session.id(), places))
    throw ProtocolError(ErrorCode::kNotFound,
                        "this client does not hold those block references; nothing dropped");
  return Reply::ok({{"unreferenced", places.size()}});
}

broker::Reply ServerHandler::kv_withdraw(broker::Session& session, const ipc::Request& request) {
  const std::vector<KvBlockPlace> places =
      places_of(ipc::parse_kv_places_request(request, /*distinct=*/true));
  for (const KvBlockPlace& place : places)
    if (kv_share_.owner_of(place.chunk) != session.id())
      throw ProtocolError(
          ErrorCode::kNotFound,
          "this client holds no KV chunk " + std::to_string(place.chunk) + "; nothing withdrawn");
  // A place of its own with nothing published there is the worker's to write already.
  json withdrawn = json::array(), referenced = json::array();
  for (size_t i = 0; i < places.size(); ++i) {
    if (kv_share_.withdraw(session.id(), places[i]) == KvShareRegistry::Withdraw::kReferenced)
      referenced.push_back(i);
    else
      withdrawn.push_back(i);
  }
  return Reply::ok({{"withdrawn", std::move(withdrawn)}, {"referenced", std::move(referenced)}});
}

}  // namespace hearth
