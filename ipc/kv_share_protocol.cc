#include "ipc/kv_share_protocol.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>

#include "ipc/errors.h"
#include "ipc/wire_bytes.h"

namespace hearth::ipc {
namespace {

using json = nlohmann::json;

[[noreturn]] void bad(std::string_view key, std::string_view expected) {
  throw ProtocolError(ErrorCode::kBadRequest,
                      "field '" + std::string(key) + "' must be " + std::string(expected));
}

const json& member(const json& object, std::string_view key) {
  if (!object.is_object()) bad(key, "in an object");
  const auto it = object.find(key);
  if (it == object.end()) bad(key, "present");
  return *it;
}

std::uint64_t unsigned_member(const json& object, std::string_view key) {
  const json& value = member(object, key);
  if (!is_unsigned_integer(value)) bad(key, "an unsigned integer");
  return value.get<std::uint64_t>();
}

WireKey key_member(const json& object, std::string_view key) {
  const json& value = member(object, key);
  if (!value.is_array() || value.size() != 2 || !is_unsigned_integer(value[0]) ||
      !is_unsigned_integer(value[1]))
    bad(key, "a key: [low, high], two unsigned 64-bit integers");
  return {value[0].get<std::uint64_t>(), value[1].get<std::uint64_t>()};
}

[[noreturn]] void too_large(std::string_view key, std::size_t entries, std::size_t most) {
  throw ProtocolError(ErrorCode::kTooLarge, std::to_string(entries) + " entries in '" +
                                                std::string(key) + "' (at most " +
                                                std::to_string(most) + ")");
}

constexpr std::size_t kPlaceBytes = 16, kKeyBytes = 16, kTokenBytes = 4;

// The bytes of a packed list: a canonical base64 string of whole `entry_bytes` entries, at most
// `most` of them (kTooLarge past it, checked on the string's length before decoding).
std::vector<std::byte> packed_member(const json& object, std::string_view key,
                                     std::size_t entry_bytes, std::size_t most) {
  const json& value = member(object, key);
  if (!value.is_string()) bad(key, "a base64 string");
  const std::string& text = value.get_ref<const std::string&>();
  // A canonical string of n bytes has at most 2 padding bytes past them.
  if (base64_decoded_size_bound(text) > most * entry_bytes + 2)
    too_large(key, base64_decoded_size_bound(text) / entry_bytes, most);
  std::optional<std::vector<std::byte>> bytes = base64_decode(text);
  if (!bytes) bad(key, "canonical base64");
  if (bytes->size() % entry_bytes != 0)
    bad(key, "whole " + std::to_string(entry_bytes) + "-byte entries");
  if (bytes->size() / entry_bytes > most) too_large(key, bytes->size() / entry_bytes, most);
  return std::move(*bytes);
}

std::vector<WirePlace> places_member(const json& object, bool allow_empty) {
  const std::vector<std::byte> bytes =
      packed_member(object, "places", kPlaceBytes, kMaxKvShareBlocks);
  if (bytes.empty() && !allow_empty) bad("places", "a non-empty list");
  std::vector<WirePlace> places(bytes.size() / kPlaceBytes);
  for (std::size_t i = 0; i < places.size(); ++i)
    places[i] = {get_u64(bytes, i * kPlaceBytes), get_u64(bytes, i * kPlaceBytes + 8)};
  return places;
}

// A non-empty list of keys, exactly `count` of them when given.
std::vector<WireKey> keys_member(const json& object, std::string_view key,
                                 std::optional<std::size_t> count) {
  const std::vector<std::byte> bytes = packed_member(object, key, kKeyBytes, kMaxKvShareBlocks);
  if (bytes.empty()) bad(key, "a non-empty list");
  const std::size_t n = bytes.size() / kKeyBytes;
  if (count && n != *count) bad(key, std::to_string(*count) + " keys, one per block");
  std::vector<WireKey> keys(n);
  for (std::size_t i = 0; i < n; ++i)
    keys[i] = {get_u64(bytes, i * kKeyBytes), get_u64(bytes, i * kKeyBytes + 8)};
  return keys;
}

std::size_t block_tokens_member(const json& object) {
  const std::uint64_t n = unsigned_member(object, "block_tokens");
  if (n == 0) bad("block_tokens", "at least 1");
  if (n > kMaxKvShareBlockTokens)
    throw ProtocolError(ErrorCode::kTooLarge, "a block of " + std::to_string(n) +
                                                  " tokens (at most " +
                                                  std::to_string(kMaxKvShareBlockTokens) + ")");
  return std::size_t(n);
}

// `blocks` blocks of `per_block` tokens each, in [0, 2^31).
std::vector<std::vector<std::int32_t>> tokens_member(const json& object, std::size_t blocks,
                                                     std::size_t per_block) {
  const std::vector<std::byte> bytes =
      packed_member(object, "tokens", kTokenBytes, kMaxKvShareBlocks * kMaxKvShareBlockTokens);
  if (bytes.size() != blocks * per_block * kTokenBytes)
    bad("tokens", std::to_string(per_block) + " tokens per block");
  std::vector<std::vector<std::int32_t>> tokens(blocks);
  std::size_t at = 0;
  for (std::vector<std::int32_t>& block : tokens) {
    block.resize(per_block);
    for (std::int32_t& token : block) {
      const std::uint32_t id = get_u32(bytes, at);
      at += kTokenBytes;
      if (id > std::uint32_t(INT32_MAX)) bad("tokens", "token ids in [0, 2^31)");
      token = std::int32_t(id);
    }
  }
  return tokens;
}

std::vector<std::uint64_t> ids_member(const json& object, std::string_view key) {
  const json& value = member(object, key);
  if (!value.is_array()) bad(key, "an array of unsigned integers");
  if (value.size() > kMaxKvShareBlocks) too_large(key, value.size(), kMaxKvShareBlocks);
  std::vector<std::uint64_t> ids;
  ids.reserve(value.size());
  for (const json& id : value) {
    if (!is_unsigned_integer(id)) bad(key, "an array of unsigned integers");
    ids.push_back(id.get<std::uint64_t>());
  }
  return ids;
}

// The one token count of every block, or invalid_argument.
template <typename Blocks>
std::size_t common_token_count(const Blocks& blocks) {
  if (blocks.empty()) return 0;
  const std::size_t n = blocks.front().tokens.size();
  for (const auto& block : blocks)
    if (block.tokens.size() != n || n == 0)
      throw std::invalid_argument("KV share blocks must hold the same number of tokens, not 0");
  return n;
}

std::string pack_places(std::span<const WirePlace> places) {
  std::vector<std::byte> bytes;
  bytes.reserve(places.size() * kPlaceBytes);
  for (const WirePlace& place : places) {
    put_u64(bytes, place.chunk);
    put_u64(bytes, place.offset);
  }
  return base64_encode(bytes);
}

template <typename Range, typename Key>
std::string pack_keys(const Range& entries, Key key_of) {
  std::vector<std::byte> bytes;
  bytes.reserve(entries.size() * kKeyBytes);
  for (const auto& entry : entries) {
    const WireKey& key = key_of(entry);
    put_u64(bytes, key.low);
    put_u64(bytes, key.high);
  }
  return base64_encode(bytes);
}

template <typename Range>
std::string pack_tokens(const Range& entries, std::size_t per_block) {
  std::vector<std::byte> bytes;
  bytes.reserve(entries.size() * per_block * kTokenBytes);
  for (const auto& entry : entries)
    for (std::int32_t token : entry.tokens) put_u32(bytes, std::uint32_t(token));
  return base64_encode(bytes);
}

std::uint64_t block_bytes_member(const json& object) {
  const std::uint64_t bytes = unsigned_member(object, "block_bytes");
  if (bytes == 0 || bytes > kMaxKvShareBlockBytes) bad("block_bytes", "in [1, 1 GiB]");
  return bytes;
}

void refuse_repeats(std::vector<WirePlace> places) {
  auto less = [](const WirePlace& a, const WirePlace& b) {
    return a.chunk != b.chunk ? a.chunk < b.chunk : a.offset < b.offset;
  };
  std::ranges::sort(places, less);
  if (std::ranges::adjacent_find(places) != places.end())
    bad("places", "a list without repeated places");
}

}  // namespace

json key_to_json(const WireKey& key) {
  return json::array({key.low, key.high});
}

json make_kv_publish_args(const KvPublishRequest& request) {
  std::vector<WirePlace> places;
  places.reserve(request.blocks.size());
  for (const KvPublishBlock& block : request.blocks) places.push_back(block.place);
  return {{"domain", key_to_json(request.domain)},
          {"block_bytes", request.block_bytes},
          {"block_tokens", common_token_count(request.blocks)},
          {"places", pack_places(places)},
          {"keys", pack_keys(request.blocks, [](const KvPublishBlock& b) { return b.key; })},
          {"parents", pack_keys(request.blocks, [](const KvPublishBlock& b) { return b.parent; })},
          {"tokens", pack_tokens(request.blocks, common_token_count(request.blocks))}};
}

json make_kv_lookup_args(const KvLookupRequest& request) {
  const std::size_t per_block = common_token_count(request.chain);
  return {{"domain", key_to_json(request.domain)},
          {"block_bytes", request.block_bytes},
          {"root", key_to_json(request.root)},
          {"block_tokens", per_block},
          {"keys", pack_keys(request.chain, [](const KvLookupLink& l) { return l.key; })},
          {"tokens", pack_tokens(request.chain, per_block)},
          {"mapped", request.mapped}};
}

json make_kv_places_args(std::span<const WirePlace> places) {
  return {{"places", pack_places(places)}};
}

json make_kv_lookup_reply(std::span<const WirePlace> places, std::span<const std::uint64_t> chunks,
                          std::span<const std::uint64_t> chunk_bytes) {
  return {{"places", pack_places(places)},
          {"chunks", std::vector<std::uint64_t>(chunks.begin(), chunks.end())},
          {"chunk_bytes", std::vector<std::uint64_t>(chunk_bytes.begin(), chunk_bytes.end())}};
}

KvPublishRequest parse_kv_publish_request(const Request& request) {
  KvPublishRequest parsed;
  parsed.domain = key_member(request.body, "domain");
  parsed.block_bytes = block_bytes_member(request.body);
  const std::size_t per_block = block_tokens_member(request.body);
  std::vector<WirePlace> places = places_member(request.body, /*allow_empty=*/false);
  const std::vector<WireKey> keys = keys_member(request.body, "keys", places.size());
  const std::vector<WireKey> parents = keys_member(request.body, "parents", places.size());
  std::vector<std::vector<std::int32_t>> tokens =
      tokens_member(request.body, places.size(), per_block);
  parsed.blocks.reserve(places.size());
  for (std::size_t i = 0; i < places.size(); ++i)
    parsed.blocks.push_back({places[i], keys[i], parents[i], std::move(tokens[i])});
  refuse_repeats(std::move(places));
  return parsed;
}

KvLookupRequest parse_kv_lookup_request(const Request& request) {
  KvLookupRequest parsed;
  parsed.domain = key_member(request.body, "domain");
  parsed.block_bytes = block_bytes_member(request.body);
  parsed.root = key_member(request.body, "root");
  const std::size_t per_block = block_tokens_member(request.body);
  const std::vector<WireKey> keys = keys_member(request.body, "keys", std::nullopt);
  const std::size_t links = keys.size();
  std::vector<std::vector<std::int32_t>> tokens = tokens_member(request.body, links, per_block);
  parsed.chain.reserve(links);
  for (std::size_t i = 0; i < links; ++i) parsed.chain.push_back({keys[i], std::move(tokens[i])});
  parsed.mapped = ids_member(request.body, "mapped");
  return parsed;
}

KvPlacesRequest parse_kv_places_request(const Request& request, bool distinct) {
  KvPlacesRequest parsed{places_member(request.body, /*allow_empty=*/false)};
  if (distinct) refuse_repeats(parsed.places);
  return parsed;
}

KvLookupReply parse_kv_lookup_reply(const json& body, std::size_t fds, std::size_t asked) {
  KvLookupReply reply{places_member(body, /*allow_empty=*/true), ids_member(body, "chunks"),
                      ids_member(body, "chunk_bytes")};
  if (reply.places.size() > asked) bad("places", "at most one per link asked for");
  if (reply.chunk_bytes.size() != reply.chunks.size() || reply.chunks.size() != fds)
    bad("chunks", "one per FD, with one size each");
  return reply;
}

}  // namespace hearth::ipc
