// The messages of prefix KV sharing across workers (issue 22 item 3), between a worker and
// hearth-server. A block is named on the wire by its place, (chunk id, byte offset) in a KV chunk
// the server leased, and by the hash chain of the engine's prefix cache: 128-bit keys, written as
// [low, high] pairs of unsigned integers. Every message is checked in full here, so the handler
// sees only well-formed fields; whether the places and chunks are the client's is the
// registry's to check (forged ones are refused there).
//
// kv_publish {"domain": K, "block_bytes": B, "blocks": [{"chunk": C, "offset": O, "key": K,
//   "parent": K, "tokens": [T, ...]}, ...]}: the worker registers full blocks of its own chunks,
//   each only after the step that filled it succeeded. Reply {"published": N, "refused": [I, ...]}
//   (indexes of blocks not published: a duplicate key, or a place taken).
// kv_lookup {"domain": K, "block_bytes": B, "root": K, "chain": [{"key": K, "tokens": [...]}],
//   "mapped": [C, ...]}: the longest run of published blocks from the chain's start. Reply
//   {"blocks": [{"chunk": C, "offset": O}, ...], "chunks": [C, ...], "chunk_bytes": [S, ...]}
//   with one FD per entry of "chunks": the hit chunks not in "mapped" (the worker maps them
//   read-only). Each hit holds one reference for the worker until kv_unref or disconnect.
// kv_unref {"blocks": [{"chunk": C, "offset": O}, ...]}: drops one reference per entry (repeats
//   drop several). All or nothing: references not held are refused (kNotFound). Reply
//   {"unreferenced": N}.
// kv_withdraw {"blocks": [{"chunk": C, "offset": O}, ...]}: the owner unpublishes its blocks to
//   write them again. Reply {"withdrawn": [I, ...], "referenced": [I, ...]}: the worker writes
//   only the withdrawn ones.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/protocol.h"

namespace hearth::ipc {

namespace op {
inline constexpr std::string_view kKvPublish = "kv_publish";
inline constexpr std::string_view kKvLookup = "kv_lookup";
inline constexpr std::string_view kKvUnref = "kv_unref";
inline constexpr std::string_view kKvWithdraw = "kv_withdraw";
}  // namespace op

inline constexpr std::size_t kMaxKvShareBlocks = 4096;       // blocks (or links) per message
inline constexpr std::size_t kMaxKvShareBlockTokens = 1024;  // tokens per block
inline constexpr std::uint64_t kMaxKvShareBlockBytes = std::uint64_t(1) << 30;

struct WireKey {
  std::uint64_t low = 0, high = 0;
  bool operator==(const WireKey&) const = default;
};

struct WirePlace {
  std::uint64_t chunk = 0, offset = 0;
  bool operator==(const WirePlace&) const = default;
};

struct KvPublishBlock {
  WirePlace place;
  WireKey key, parent;
  std::vector<std::int32_t> tokens;
};
struct KvPublishRequest {
  WireKey domain;
  std::uint64_t block_bytes = 0;
  std::vector<KvPublishBlock> blocks;
};

struct KvLookupLink {
  WireKey key;
  std::vector<std::int32_t> tokens;
};
struct KvLookupRequest {
  WireKey domain;
  std::uint64_t block_bytes = 0;
  WireKey root;
  std::vector<KvLookupLink> chain;
  std::vector<std::uint64_t> mapped;  // chunks the worker has mapped already: no FD for them
};

// kv_unref and kv_withdraw: a list of places.
struct KvPlacesRequest {
  std::vector<WirePlace> places;
};

nlohmann::json make_kv_publish_args(const KvPublishRequest& request);
nlohmann::json make_kv_lookup_args(const KvLookupRequest& request);
nlohmann::json make_kv_places_args(std::span<const WirePlace> places);

// Each throws ProtocolError: kBadRequest for a missing, mistyped or out-of-range field (a key
// that is not two unsigned 64-bit integers, a token outside [0, 2^31), block_bytes 0 or over
// kMaxKvShareBlockBytes, an empty list, a block with no tokens, a place twice in one publish or
// withdraw), kTooLarge for more than kMaxKvShareBlocks entries or kMaxKvShareBlockTokens tokens.
KvPublishRequest parse_kv_publish_request(const Request& request);
KvLookupRequest parse_kv_lookup_request(const Request& request);
// `distinct`: refuse repeated places (kv_withdraw); kv_unref allows them.
KvPlacesRequest parse_kv_places_request(const Request& request, bool distinct);

nlohmann::json key_to_json(const WireKey& key);
nlohmann::json place_to_json(const WirePlace& place);

}  // namespace hearth::ipc
