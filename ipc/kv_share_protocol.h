// The messages of prefix KV sharing across workers (issue 22 item 3), between a worker and
// hearth-server. A block is named on the wire by its place, (chunk id, byte offset) in a KV chunk
// the server leased, and by the hash chain of the engine's prefix cache: 128-bit keys. Lists of
// blocks travel packed (protocol version 2): one base64 string (ipc/wire_bytes.h) per field,
// little-endian, a place as chunk then offset (2 x u64), a key as low then high (2 x u64), a
// token as an int32 in [0, 2^31); every block of a message holds "block_tokens" tokens. Single
// keys (domain, root) are [low, high] pairs of unsigned integers. Every message is checked in
// full here, so the handler sees only well-formed fields; whether the places and chunks are the
// client's is the registry's to check (forged ones are refused there).
//
// kv_publish {"domain": K, "block_bytes": B, "block_tokens": N, "places": P, "keys": K,
//   "parents": K, "tokens": T}: the worker registers full blocks of its own chunks, each only
//   after the step that filled it succeeded. Reply {"published": N, "refused": [I, ...]}
//   (indexes of blocks not published: a duplicate key, or a place taken).
// kv_lookup {"domain": K, "block_bytes": B, "root": K, "block_tokens": N, "keys": K,
//   "tokens": T, "mapped": [C, ...]}: the longest run of published blocks from the chain's start
//   (link i is keys[i] over tokens[i*N, (i+1)*N)). Reply {"places": P, "chunks": [C, ...],
//   "chunk_bytes": [S, ...]} with one FD per entry of "chunks": the hit chunks not in "mapped"
//   (the worker maps them read-only). Each hit holds one reference for the worker until kv_unref
//   or disconnect.
// kv_unref {"places": P}: drops one reference per place (repeats drop several). All or nothing:
//   references not held are refused (kNotFound). Reply {"unreferenced": N}.
// kv_withdraw {"places": P}: the owner unpublishes its blocks to write them again. Reply
//   {"withdrawn": [I, ...], "referenced": [I, ...]}: the worker writes only the withdrawn ones.
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

// What a kv_lookup found: the places of the run, and the chunks whose FDs came with the reply.
struct KvLookupReply {
  std::vector<WirePlace> places;
  std::vector<std::uint64_t> chunks, chunk_bytes;
};

// Each throws std::invalid_argument for a message it cannot write: blocks (or links) of
// different token counts, or a block with none.
nlohmann::json make_kv_publish_args(const KvPublishRequest& request);
nlohmann::json make_kv_lookup_args(const KvLookupRequest& request);
nlohmann::json make_kv_places_args(std::span<const WirePlace> places);
// The reply's fields (FDs go beside them, one per chunk).
nlohmann::json make_kv_lookup_reply(std::span<const WirePlace> places,
                                    std::span<const std::uint64_t> chunks,
                                    std::span<const std::uint64_t> chunk_bytes);

// Each throws ProtocolError: kBadRequest for a missing, mistyped or out-of-range field (a key
// that is not two unsigned 64-bit integers, a string that is not canonical base64 or whose bytes
// are not whole entries, lists of different lengths, tokens that are not block_tokens per block,
// a token outside [0, 2^31), block_bytes 0 or over kMaxKvShareBlockBytes, block_tokens 0, an
// empty list, a place twice in one publish or withdraw), kTooLarge for more than
// kMaxKvShareBlocks entries or kMaxKvShareBlockTokens tokens per block.
KvPublishRequest parse_kv_publish_request(const Request& request);
KvLookupRequest parse_kv_lookup_request(const Request& request);
// `distinct`: refuse repeated places (kv_withdraw); kv_unref allows them.
KvPlacesRequest parse_kv_places_request(const Request& request, bool distinct);
// The worker's side: throws ProtocolError(kBadRequest) for a reply that is not well formed
// (the same checks, and "chunks" and "chunk_bytes" of one length, `fds` of it), or that has
// more places than `asked` links.
KvLookupReply parse_kv_lookup_reply(const nlohmann::json& body, std::size_t fds, std::size_t asked);

nlohmann::json key_to_json(const WireKey& key);

}  // namespace hearth::ipc
