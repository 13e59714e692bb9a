// The prefix KV sharing messages (issue 22 item 3; packed lists since protocol version 2): what a
// worker makes parses back the same, and hostile messages (missing or mistyped fields, forged
// keys, strings that are not canonical base64 or not whole entries, lists of different lengths,
// out-of-range tokens and sizes, oversized lists, repeated places, seeded random mutations) are
// refused with ProtocolError and nothing else.
#include "ipc/kv_share_protocol.h"

#include <gtest/gtest.h>

#include <string>

#include "ipc/errors.h"
#include "ipc/wire_bytes.h"
#include "tests/support/fuzz_rng.h"

namespace hearth::ipc {
namespace {

using json = nlohmann::json;

Request request_of(std::string_view op, json args) {
  args["op"] = std::string(op);
  args["id"] = 1;
  return parse_request(std::move(args));
}

KvPublishRequest sample_publish() {
  KvPublishRequest r;
  r.domain = {~std::uint64_t(0), 5};
  r.block_bytes = 65536;
  r.blocks.push_back({{3, 0}, {1, 2}, {7, 8}, {1, 2, 3, INT32_MAX}});
  r.blocks.push_back({{3, 65536}, {9, 10}, {1, 2}, {0, 5, 6, 7}});
  return r;
}

KvLookupRequest sample_lookup() {
  KvLookupRequest r;
  r.domain = {1, 2};
  r.block_bytes = 4096;
  r.root = {3, ~std::uint64_t(0)};
  r.chain.push_back({{5, 6}, {10, 11}});
  r.chain.push_back({{7, 8}, {12, 0}});
  r.mapped = {4, 9};
  return r;
}

// A packed field of little-endian integers, as a hostile peer would write it.
std::string packed_u64(std::initializer_list<std::uint64_t> values) {
  std::vector<std::byte> bytes;
  for (std::uint64_t v : values) put_u64(bytes, v);
  return base64_encode(bytes);
}
std::string packed_u32(std::initializer_list<std::uint32_t> values) {
  std::vector<std::byte> bytes;
  for (std::uint32_t v : values) put_u32(bytes, v);
  return base64_encode(bytes);
}

ErrorCode publish_error(const json& args) {
  try {
    parse_kv_publish_request(request_of(op::kKvPublish, args));
  } catch (const ProtocolError& e) {
    return e.code();
  }
  ADD_FAILURE() << "accepted: " << args.dump();
  return ErrorCode::kInternal;
}

ErrorCode lookup_error(const json& args) {
  try {
    parse_kv_lookup_request(request_of(op::kKvLookup, args));
  } catch (const ProtocolError& e) {
    return e.code();
  }
  ADD_FAILURE() << "accepted: " << args.dump();
  return ErrorCode::kInternal;
}

TEST(KvShareProtocol, MessagesParseBackAsMade) {
  const KvPublishRequest publish = sample_publish();
  const KvPublishRequest p =
      parse_kv_publish_request(request_of(op::kKvPublish, make_kv_publish_args(publish)));
  EXPECT_EQ(p.domain, publish.domain);
  EXPECT_EQ(p.block_bytes, publish.block_bytes);
  ASSERT_EQ(p.blocks.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(p.blocks[i].place, publish.blocks[i].place);
    EXPECT_EQ(p.blocks[i].key, publish.blocks[i].key);
    EXPECT_EQ(p.blocks[i].parent, publish.blocks[i].parent);
    EXPECT_EQ(p.blocks[i].tokens, publish.blocks[i].tokens);
  }
  const KvLookupRequest lookup = sample_lookup();
  const KvLookupRequest l =
      parse_kv_lookup_request(request_of(op::kKvLookup, make_kv_lookup_args(lookup)));
  EXPECT_EQ(l.domain, lookup.domain);
  EXPECT_EQ(l.root, lookup.root);
  ASSERT_EQ(l.chain.size(), 2u);
  EXPECT_EQ(l.chain[1].key, lookup.chain[1].key);
  EXPECT_EQ(l.chain[0].tokens, lookup.chain[0].tokens);
  EXPECT_EQ(l.mapped, lookup.mapped);
  const std::vector<WirePlace> places{{1, 0}, {1, 0}, {2, 4096}};
  const KvPlacesRequest u =
      parse_kv_places_request(request_of(op::kKvUnref, make_kv_places_args(places)), false);
  EXPECT_EQ(u.places, places);

  const std::vector<std::uint64_t> chunks{4, 9}, sizes{2 << 20, 2 << 20};
  const KvLookupReply reply = parse_kv_lookup_reply(
      make_ok_reply(1, make_kv_lookup_reply(places, chunks, sizes)), 2, places.size());
  EXPECT_EQ(reply.places, places);
  EXPECT_EQ(reply.chunks, chunks);
  EXPECT_EQ(reply.chunk_bytes, sizes);
  // A miss: no places, no chunks.
  EXPECT_TRUE(parse_kv_lookup_reply(make_kv_lookup_reply({}, {}, {}), 0, 1).places.empty());
}

TEST(KvShareProtocol, BlocksOfDifferentSizesCannotBeWritten) {
  KvLookupRequest lookup = sample_lookup();
  lookup.chain[1].tokens.push_back(3);
  EXPECT_THROW(make_kv_lookup_args(lookup), std::invalid_argument);
  KvPublishRequest publish = sample_publish();
  publish.blocks[0].tokens.clear();
  publish.blocks[1].tokens.clear();
  EXPECT_THROW(make_kv_publish_args(publish), std::invalid_argument);
}

TEST(KvShareProtocol, Base64IsCanonicalBothWays) {
  std::vector<std::byte> bytes;
  for (int n = 0; n < 64; ++n) {
    EXPECT_EQ(base64_decode(base64_encode(bytes)), bytes) << n;
    bytes.push_back(std::byte(n * 37 + 11));
  }
  EXPECT_EQ(base64_encode(std::as_bytes(std::span(std::string_view("foob")))), "Zm9vYg==");
  for (const char* text : {"A", "AB", "ABC", "AB=A", "A===", "====", "AB==AAAA",
                           "Zm9vYh==", "Zm9vYmF=", "Zm9v*YmFy", "Zm9vYmF*", "Zm9 "})
    EXPECT_FALSE(base64_decode(text)) << text;
}

TEST(KvShareProtocol, MalformedPublishesAreRefused) {
  const json good = make_kv_publish_args(sample_publish());
  auto with = [&](auto change) {
    json args = good;
    change(args);
    return args;
  };
  using E = ErrorCode;
  EXPECT_EQ(publish_error(with([](json& a) { a.erase("domain"); })), E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["domain"] = json::array({1}); })), E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) {
              a["domain"] = json::array({1, 2, 3});
            })),
            E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) {
              a["domain"] = json::array({-1, 2});
            })),
            E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["domain"] = "0102"; })), E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["block_bytes"] = 0; })), E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["block_bytes"] = (std::uint64_t(1) << 30) + 1; })),
            E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["block_bytes"] = 1.5; })), E::kBadRequest);
  // The token count per block: 0, fractional, another than the tokens hold, too many.
  EXPECT_EQ(publish_error(with([](json& a) { a["block_tokens"] = 0; })), E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["block_tokens"] = 4.0; })), E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["block_tokens"] = 2; })), E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["block_tokens"] = kMaxKvShareBlockTokens + 1; })),
            E::kTooLarge);
  // Places: none, not a string, not base64, not canonical, not whole 16-byte places, repeated.
  EXPECT_EQ(publish_error(with([](json& a) { a["places"] = ""; })), E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) {
              a["places"] = json::array({3, 0});
            })),
            E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a.erase("places"); })), E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["places"] = "AAAA!AAA"; })), E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["places"] = "AB=="; })), E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) {
              a["places"] = a["places"].get<std::string>() + "AAAA";  // 3 bytes more
            })),
            E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) {
              a["places"] = packed_u64({3, 0, 3, 0});
            })),
            E::kBadRequest);  // the same place twice
  EXPECT_EQ(publish_error(with([](json& a) {
              a["places"] = packed_u64({3, 0});
            })),
            E::kBadRequest);  // one place for two keys
  // Keys and parents: one per place, whole 16-byte keys.
  EXPECT_EQ(publish_error(with([](json& a) { a["keys"] = packed_u64({1, 2}); })), E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) {
              a["parents"] = packed_u64({1, 2, 3, 4, 5, 6});
            })),
            E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) {
              a["parents"] = packed_u64({1, 2, 3});
            })),
            E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["parents"] = nullptr; })), E::kBadRequest);
  // Tokens: short of block_tokens per block, not whole int32s, out of [0, 2^31).
  EXPECT_EQ(publish_error(with([](json& a) {
              a["tokens"] = packed_u32({1, 2, 3, 4, 5, 6, 7});
            })),
            E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) {
              a["tokens"] = a["tokens"].get<std::string>() + "AAA=";  // 2 bytes more
            })),
            E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) {
              a["tokens"] = packed_u32({1, 2, 3, 4, 5, 0xffffffffu, 7, 8});
            })),
            E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) {
              a["tokens"] = packed_u32({1, 2, 3, 2147483648u, 5, 6, 7, 8});
            })),
            E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["tokens"] = 7; })), E::kBadRequest);
  // More places than a message may hold: refused on the string's length, before decoding.
  EXPECT_EQ(publish_error(with([](json& a) {
              std::vector<std::byte> bytes;
              for (std::uint64_t i = 0; i <= kMaxKvShareBlocks; ++i) {
                put_u64(bytes, 3);
                put_u64(bytes, i * 65536);
              }
              a["places"] = base64_encode(bytes);
            })),
            E::kTooLarge);
}

TEST(KvShareProtocol, MalformedLookupsUnrefsWithdrawsAndRepliesAreRefused) {
  const json good = make_kv_lookup_args(sample_lookup());
  auto with = [&](auto change) {
    json args = good;
    change(args);
    return args;
  };
  using E = ErrorCode;
  EXPECT_EQ(lookup_error(with([](json& a) { a.erase("root"); })), E::kBadRequest);
  EXPECT_EQ(lookup_error(with([](json& a) { a["keys"] = ""; })), E::kBadRequest);
  EXPECT_EQ(lookup_error(with([](json& a) { a.erase("keys"); })), E::kBadRequest);
  EXPECT_EQ(lookup_error(with([](json& a) { a["keys"] = packed_u64({5, 6, 7}); })), E::kBadRequest);
  EXPECT_EQ(lookup_error(with([](json& a) { a["tokens"] = 5; })), E::kBadRequest);
  EXPECT_EQ(lookup_error(with([](json& a) {
              a["tokens"] = packed_u32({10, 11, 12});
            })),
            E::kBadRequest);
  EXPECT_EQ(lookup_error(with([](json& a) {
              a["tokens"] = packed_u32({10, 11, 12, 1u << 31});
            })),
            E::kBadRequest);
  EXPECT_EQ(lookup_error(with([](json& a) { a["block_tokens"] = 1; })), E::kBadRequest);
  EXPECT_EQ(lookup_error(with([](json& a) { a.erase("block_tokens"); })), E::kBadRequest);
  EXPECT_EQ(lookup_error(with([](json& a) { a.erase("mapped"); })), E::kBadRequest);
  EXPECT_EQ(lookup_error(with([](json& a) {
              a["mapped"] = json::array({1, "2"});
            })),
            E::kBadRequest);
  EXPECT_EQ(lookup_error(with([](json& a) {
              a["mapped"] = std::vector<std::uint64_t>(kMaxKvShareBlocks + 1, 1);
            })),
            E::kTooLarge);

  auto places_error = [](const json& args, bool distinct) {
    try {
      parse_kv_places_request(request_of(op::kKvWithdraw, args), distinct);
    } catch (const ProtocolError& e) {
      return e.code();
    }
    ADD_FAILURE() << "accepted: " << args.dump();
    return E::kInternal;
  };
  const std::vector<WirePlace> repeated{{1, 0}, {1, 0}};
  EXPECT_EQ(places_error(make_kv_places_args(repeated), true), E::kBadRequest);
  EXPECT_EQ(places_error(json{{"places", ""}}, false), E::kBadRequest);
  EXPECT_EQ(places_error(json{{"places", packed_u64({1})}}, false), E::kBadRequest);
  EXPECT_EQ(places_error(json{{"places", json::array({1, 2})}}, false), E::kBadRequest);
  EXPECT_EQ(places_error(json{{"places", "AAAAAAAAAAAAAAAAAAAAAAA="}}, false), E::kBadRequest);
  EXPECT_EQ(places_error(json::object(), false), E::kBadRequest);

  // The worker's side: a reply with more places than links asked for, chunks without their
  // FDs or sizes, places that are not whole.
  auto reply_error = [](const json& body, std::size_t fds, std::size_t asked) {
    try {
      parse_kv_lookup_reply(body, fds, asked);
    } catch (const ProtocolError& e) {
      return e.code();
    }
    ADD_FAILURE() << "accepted: " << body.dump();
    return E::kInternal;
  };
  const json reply = make_kv_lookup_reply(repeated, std::vector<std::uint64_t>{1},
                                          std::vector<std::uint64_t>{2 << 20});
  EXPECT_EQ(reply_error(reply, 1, 1), E::kBadRequest);
  EXPECT_EQ(reply_error(reply, 0, 2), E::kBadRequest);
  EXPECT_EQ(reply_error(reply, 2, 2), E::kBadRequest);
  json sizes_short = reply;
  sizes_short["chunk_bytes"] = json::array();
  EXPECT_EQ(reply_error(sizes_short, 1, 2), E::kBadRequest);
  json torn = reply;
  torn["places"] = packed_u64({1, 0, 1});
  EXPECT_EQ(reply_error(torn, 1, 2), E::kBadRequest);
  json lost = reply;
  lost.erase("places");
  EXPECT_EQ(reply_error(lost, 1, 2), E::kBadRequest);
}

// Seeded mutations of valid messages: every one parses or throws ProtocolError, nothing else.
json mutate_value(fuzz::Rng& rng) {
  switch (rng.below(8)) {
    case 0:
      return nullptr;
    case 1:
      return -int64_t(rng.below(1000)) - 1;
    case 2:
      return rng.next();
    case 3:
      return 0.5;
    case 4:
      return "x";
    case 5:
      return json::array();
    case 6:
      return json::object();
    default:
      return json::array({rng.next(), rng.next(), rng.next()});
  }
}

// A packed field damaged in place: a character changed, cut or added.
void mutate_string(std::string& text, fuzz::Rng& rng) {
  static constexpr std::string_view kChars = "A/+=z0!\x80";
  const std::size_t at = text.empty() ? 0 : rng.below(text.size());
  switch (rng.below(3)) {
    case 0:
      if (!text.empty()) text[at] = kChars[rng.below(kChars.size())];
      break;
    case 1:
      text.resize(at);
      break;
    default:
      text.insert(at, std::string(1 + rng.below(4), kChars[rng.below(kChars.size())]));
  }
}

void mutate(json& value, fuzz::Rng& rng, int depth = 0) {
  if (value.is_string() && rng.below(2)) {
    mutate_string(value.get_ref<std::string&>(), rng);
    return;
  }
  if ((value.is_object() || value.is_array()) && !value.empty() && depth < 6 && rng.below(4)) {
    auto it = value.begin();
    std::advance(it, long(rng.below(value.size())));
    mutate(*it, rng, depth + 1);
    return;
  }
  if (value.is_object() && !value.empty() && rng.below(2)) {
    auto it = value.begin();
    std::advance(it, long(rng.below(value.size())));
    value.erase(it);
    return;
  }
  value = mutate_value(rng);
}

TEST(KvShareProtocol, SeededMutationsParseOrAreRefused) {
  const std::vector<WirePlace> places{{1, 0}, {2, 8192}};
  const json seeds[] = {make_kv_publish_args(sample_publish()),
                        make_kv_lookup_args(sample_lookup()), make_kv_places_args(places),
                        make_kv_lookup_reply(places, std::vector<std::uint64_t>{2},
                                             std::vector<std::uint64_t>{2 << 20})};
  for (std::uint64_t c = 0; c < 4000; ++c) {
    fuzz::Rng rng{c};
    const size_t kind = c % 4;
    json args = seeds[kind];
    for (size_t m = 0, n = 1 + rng.below(3); m < n; ++m) mutate(args, rng);
    if (!args.is_object()) continue;  // not a request envelope: parse_request's to refuse
    try {
      const Request request = request_of("kv", args);
      if (kind == 0) parse_kv_publish_request(request);
      if (kind == 1) parse_kv_lookup_request(request);
      if (kind == 2) parse_kv_places_request(request, c % 2 == 0);
      if (kind == 3) parse_kv_lookup_reply(args, 1, 2);
    } catch (const ProtocolError&) {
    } catch (const std::exception& e) {
      FAIL() << "case " << c << ": " << e.what() << " on " << args.dump();
    }
  }
}

}  // namespace
}  // namespace hearth::ipc
