#include "ipc/kv_share_protocol.h"

#include <algorithm>
#include <string>

#include "ipc/errors.h"

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

// A non-empty array of at most kMaxKvShareBlocks entries.
const json& list_member(const json& object, std::string_view key) {
  const json& value = member(object, key);
  if (!value.is_array() || value.empty()) bad(key, "a non-empty array");
  if (value.size() > kMaxKvShareBlocks)
    throw ProtocolError(ErrorCode::kTooLarge, std::to_string(value.size()) + " entries in '" +
                                                  std::string(key) + "' (at most " +
                                                  std::to_string(kMaxKvShareBlocks) + ")");
  return value;
}

std::vector<std::int32_t> tokens_member(const json& object) {
  const json& value = member(object, "tokens");
  if (!value.is_array() || value.empty()) bad("tokens", "a non-empty array");
  if (value.size() > kMaxKvShareBlockTokens)
    throw ProtocolError(ErrorCode::kTooLarge, "a block of " + std::to_string(value.size()) +
                                                  " tokens (at most " +
                                                  std::to_string(kMaxKvShareBlockTokens) + ")");
  std::vector<std::int32_t> tokens;
  tokens.reserve(value.size());
  for (const json& token : value) {
    if (!is_unsigned_integer(token) || token.get<std::uint64_t>() > std::uint64_t(INT32_MAX))
      bad("tokens", "an array of token ids in [0, 2^31)");
    tokens.push_back(std::int32_t(token.get<std::uint64_t>()));
  }
  return tokens;
}

std::uint64_t block_bytes_member(const json& object) {
  const std::uint64_t bytes = unsigned_member(object, "block_bytes");
  if (bytes == 0 || bytes > kMaxKvShareBlockBytes) bad("block_bytes", "in [1, 1 GiB]");
  return bytes;
}

WirePlace place_of(const json& object) {
  return {unsigned_member(object, "chunk"), unsigned_member(object, "offset")};
}

void refuse_repeats(std::vector<WirePlace> places) {
  auto less = [](const WirePlace& a, const WirePlace& b) {
    return a.chunk != b.chunk ? a.chunk < b.chunk : a.offset < b.offset;
  };
  std::ranges::sort(places, less);
  if (std::ranges::adjacent_find(places) != places.end())
    bad("blocks", "an array without repeated places");
}

}  // namespace

json key_to_json(const WireKey& key) {
  return json::array({key.low, key.high});
}

json place_to_json(const WirePlace& place) {
  return {{"chunk", place.chunk}, {"offset", place.offset}};
}

json make_kv_publish_args(const KvPublishRequest& request) {
  json blocks = json::array();
  for (const KvPublishBlock& block : request.blocks) {
    json entry = place_to_json(block.place);
    entry["key"] = key_to_json(block.key);
    entry["parent"] = key_to_json(block.parent);
    entry["tokens"] = block.tokens;
    blocks.push_back(std::move(entry));
  }
  return {{"domain", key_to_json(request.domain)},
          {"block_bytes", request.block_bytes},
          {"blocks", std::move(blocks)}};
}

json make_kv_lookup_args(const KvLookupRequest& request) {
  json chain = json::array();
  for (const KvLookupLink& link : request.chain)
    chain.push_back({{"key", key_to_json(link.key)}, {"tokens", link.tokens}});
  return {{"domain", key_to_json(request.domain)},
          {"block_bytes", request.block_bytes},
          {"root", key_to_json(request.root)},
          {"chain", std::move(chain)},
          {"mapped", request.mapped}};
}

json make_kv_places_args(std::span<const WirePlace> places) {
  json blocks = json::array();
  for (const WirePlace& place : places) blocks.push_back(place_to_json(place));
  return {{"blocks", std::move(blocks)}};
}

KvPublishRequest parse_kv_publish_request(const Request& request) {
  KvPublishRequest parsed;
  parsed.domain = key_member(request.body, "domain");
  parsed.block_bytes = block_bytes_member(request.body);
  const json& blocks = list_member(request.body, "blocks");
  std::vector<WirePlace> places;
  for (const json& block : blocks) {
    KvPublishBlock entry;
    entry.place = place_of(block);
    entry.key = key_member(block, "key");
    entry.parent = key_member(block, "parent");
    entry.tokens = tokens_member(block);
    places.push_back(entry.place);
    parsed.blocks.push_back(std::move(entry));
  }
  refuse_repeats(std::move(places));
  return parsed;
}

KvLookupRequest parse_kv_lookup_request(const Request& request) {
  KvLookupRequest parsed;
  parsed.domain = key_member(request.body, "domain");
  parsed.block_bytes = block_bytes_member(request.body);
  parsed.root = key_member(request.body, "root");
  for (const json& link : list_member(request.body, "chain"))
    parsed.chain.push_back({key_member(link, "key"), tokens_member(link)});
  const json& mapped = member(request.body, "mapped");
  if (!mapped.is_array()) bad("mapped", "an array of chunk ids");
  if (mapped.size() > kMaxKvShareBlocks)
    throw ProtocolError(ErrorCode::kTooLarge, std::to_string(mapped.size()) +
                                                  " entries in 'mapped' (at most " +
                                                  std::to_string(kMaxKvShareBlocks) + ")");
  for (const json& id : mapped) {
    if (!is_unsigned_integer(id)) bad("mapped", "an array of chunk ids");
    parsed.mapped.push_back(id.get<std::uint64_t>());
  }
  return parsed;
}

KvPlacesRequest parse_kv_places_request(const Request& request, bool distinct) {
  KvPlacesRequest parsed;
  for (const json& block : list_member(request.body, "blocks"))
    parsed.places.push_back(place_of(block));
  if (distinct) refuse_repeats(parsed.places);
  return parsed;
}

}  // namespace hearth::ipc
