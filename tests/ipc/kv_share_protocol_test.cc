// The prefix KV sharing messages (issue 22 item 3): what a worker makes parses back the same,
// and hostile messages (missing or mistyped fields, forged keys, out-of-range tokens and sizes,
// oversized lists, repeated places, seeded random mutations) are refused with ProtocolError and
// nothing else.
#include "ipc/kv_share_protocol.h"

#include <gtest/gtest.h>

#include <string>

#include "ipc/errors.h"
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
  r.blocks.push_back({{3, 65536}, {9, 10}, {1, 2}, {0}});
  return r;
}

KvLookupRequest sample_lookup() {
  KvLookupRequest r;
  r.domain = {1, 2};
  r.block_bytes = 4096;
  r.root = {3, ~std::uint64_t(0)};
  r.chain.push_back({{5, 6}, {10, 11}});
  r.chain.push_back({{7, 8}, {12}});
  r.mapped = {4, 9};
  return r;
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
  EXPECT_EQ(publish_error(with([](json& a) { a["blocks"] = json::array(); })), E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["blocks"] = json::object(); })), E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["blocks"][0]["chunk"] = -3; })), E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["blocks"][0].erase("offset"); })), E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["blocks"][1]["parent"] = nullptr; })),
            E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["blocks"][0]["tokens"] = json::array(); })),
            E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["blocks"][0]["tokens"][1] = -1; })), E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["blocks"][0]["tokens"][1] = 2147483648ull; })),
            E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["blocks"][0]["tokens"][1] = "7"; })),
            E::kBadRequest);
  EXPECT_EQ(publish_error(with([](json& a) { a["blocks"][1]["offset"] = 0; })),
            E::kBadRequest);  // the same place twice
  EXPECT_EQ(publish_error(with([](json& a) {
              a["blocks"][0]["tokens"] = std::vector<int>(kMaxKvShareBlockTokens + 1, 1);
            })),
            E::kTooLarge);
  EXPECT_EQ(publish_error(with([](json& a) {
              json block = a["blocks"][0];
              a["blocks"] = json::array();
              for (std::uint64_t i = 0; i <= kMaxKvShareBlocks; ++i) {
                block["offset"] = i * 65536;
                a["blocks"].push_back(block);
              }
            })),
            E::kTooLarge);
}

TEST(KvShareProtocol, MalformedLookupsUnrefsAndWithdrawsAreRefused) {
  const json good = make_kv_lookup_args(sample_lookup());
  auto with = [&](auto change) {
    json args = good;
    change(args);
    return args;
  };
  using E = ErrorCode;
  EXPECT_EQ(lookup_error(with([](json& a) { a.erase("root"); })), E::kBadRequest);
  EXPECT_EQ(lookup_error(with([](json& a) { a["chain"] = json::array(); })), E::kBadRequest);
  EXPECT_EQ(lookup_error(with([](json& a) { a["chain"][0].erase("key"); })), E::kBadRequest);
  EXPECT_EQ(lookup_error(with([](json& a) { a["chain"][0]["tokens"] = 5; })), E::kBadRequest);
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
  EXPECT_EQ(places_error(json{{"blocks", json::array()}}, false), E::kBadRequest);
  EXPECT_EQ(places_error(json{{"blocks", json::array({json{{"chunk", 1}}})}}, false),
            E::kBadRequest);
  EXPECT_EQ(places_error(json{{"blocks", json::array({1, 2})}}, false), E::kBadRequest);
  EXPECT_EQ(places_error(json::object(), false), E::kBadRequest);
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

void mutate(json& value, fuzz::Rng& rng, int depth = 0) {
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
  const json seeds[] = {make_kv_publish_args(sample_publish()),
                        make_kv_lookup_args(sample_lookup()),
                        make_kv_places_args(std::vector<WirePlace>{{1, 0}, {2, 8192}})};
  for (std::uint64_t c = 0; c < 3000; ++c) {
    fuzz::Rng rng{c};
    const size_t kind = c % 3;
    json args = seeds[kind];
    for (size_t m = 0, n = 1 + rng.below(3); m < n; ++m) mutate(args, rng);
    if (!args.is_object()) continue;  // not a request envelope: parse_request's to refuse
    try {
      const Request request = request_of("kv", args);
      if (kind == 0) parse_kv_publish_request(request);
      if (kind == 1) parse_kv_lookup_request(request);
      if (kind == 2) parse_kv_places_request(request, c % 2 == 0);
    } catch (const ProtocolError&) {
    } catch (const std::exception& e) {
      FAIL() << "case " << c << ": " << e.what() << " on " << args.dump();
    }
  }
}

}  // namespace
}  // namespace hearth::ipc
