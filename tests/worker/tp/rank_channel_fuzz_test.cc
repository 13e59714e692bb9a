// The tensor-parallel channel's messages (worker/tp/rank_channel.h) under seeded mutations: a
// hello and a step plan with fields removed, retyped or set to hostile values are either parsed
// into what they say or refused with std::runtime_error naming the channel; nothing else
// escapes, and a good message survives the round trip unchanged.
#include <gtest/gtest.h>

#include <limits>

#include "tests/support/fuzz_rng.h"
#include "worker/tp/rank_channel.h"

namespace hearth {
namespace {

using nlohmann::json;

TpHello good_hello() {
  TpHello h;
  h.rank = 1;
  h.world_size = 4;
  h.model_dir = "/models/m";
  h.model_identity = "dir:abc";
  h.context_length = 256;
  h.kv_block_size = 16;
  h.kv_blocks = 64;
  h.barrier_timeout_ms = 1000;
  return h;
}

json good_plan() {
  const std::vector<int32_t> a = {1, 2, 3}, b = {7}, ta = {0}, tb = {1, 2};
  ForwardBatch batch;
  batch.entries.push_back({a, 0, ta, true});
  batch.entries.push_back({b, 20, tb, false});
  return forward_message(batch);
}

json hostile(fuzz::Rng& rng) {
  switch (rng.below(10)) {
    case 0:
      return nullptr;
    case 1:
      return -1;
    case 2:
      return std::numeric_limits<int64_t>::max();
    case 3:
      return 1e300;
    case 4:
      return "x";
    case 5:
      return json::array({1, "two", nullptr});
    case 6:
      return json::object({{"a", 1}});
    case 7:
      return true;
    case 8:
      return json::array({std::numeric_limits<int64_t>::min()});
    default:
      return int64_t(rng.next() % 100000) - 50000;
  }
}

// Replaces, removes or adds one field somewhere in `m` (entries included).
void mutate(json& m, fuzz::Rng& rng) {
  json* target = &m;
  if (m.contains("entries") && m["entries"].is_array() && !m["entries"].empty() && rng.below(2))
    target = &m["entries"][rng.below(m["entries"].size())];
  if (!target->is_object() || target->empty()) return;
  auto it = target->begin();
  std::advance(it, long(rng.below(target->size())));
  switch (rng.below(3)) {
    case 0:
      target->erase(it.key());
      break;
    case 1:
      (*target)[it.key()] = hostile(rng);
      break;
    default:
      (*target)["extra" + std::to_string(rng.below(3))] = hostile(rng);
      break;
  }
}

TEST(RankChannelFuzz, MutatedMessagesAreParsedOrRefusedByName) {
  const TpHello want = good_hello();
  const TpHello back = parse_hello(hello_message(want));
  EXPECT_EQ(hello_message(back), hello_message(want));
  EXPECT_EQ(forward_message(parse_forward(good_plan()).batch), good_plan());
  for (uint64_t c = 0; c < 3000; ++c) {
    fuzz::Rng rng{c};
    const bool hello = c % 2 == 0;
    json m = hello ? hello_message(want) : good_plan();
    for (size_t n = 1 + rng.below(3); n > 0; --n) mutate(m, rng);
    try {
      if (hello) {
        const TpHello h = parse_hello(m);
        EXPECT_TRUE(h.rank >= 1 && h.rank < h.world_size) << "case " << c;
      } else {
        const StepPlan p = parse_forward(m);
        for (size_t i = 0; i < p.batch.entries.size(); ++i)
          EXPECT_EQ(p.batch.entries[i].tokens.data(), p.tokens[i].data()) << "case " << c;
      }
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("tensor-parallel channel: ", 0), 0u)
          << "case " << c << ": " << e.what();
    }
  }
}

// A pool that answers every call with nothing found, nothing taken, nothing free.
class EmptySharedKv final : public SharedKv {
 public:
  int first_foreign_block() const override { return 64; }
  int foreign_capacity() const override { return 64; }
  void set_domain(const BlockKey&) override {}
  std::vector<int32_t> find(const BlockKey&, std::span<const SharedKvLink>) override { return {}; }
  std::vector<int32_t> find_at(const BlockKey&, std::span<const SharedKvLink>,
                               std::span<const int32_t>) override {
    return {};
  }
  void release(std::span<const int32_t>) override {}
  uint64_t publish(std::span<const SharedKvBlock>) override { return 0; }
  std::vector<int32_t> withdraw(std::span<const int32_t>) override { return {}; }
};

// kv_share messages, mutated (their links and blocks included), are answered or refused by name.
TEST(RankChannelFuzz, MutatedKvShareMessagesAreAnsweredOrRefusedByName) {
  EmptySharedKv pool;
  const std::vector<int32_t> t = {1, 2};
  const std::vector<SharedKvLink> chain = {{{1, 2}, t}, {{3, 4}, t}};
  const std::vector<int32_t> ids = {70, 71};
  const std::vector<SharedKvBlock> blocks = {{3, {1, 2}, {3, 4}, t}};
  const std::vector<json> good = {
      kv_share_domain_message({1, 2}),          kv_share_find_message({5, 6}, chain, ids),
      kv_share_find_message({5, 6}, chain, {}), kv_share_release_message(ids),
      kv_share_publish_message(blocks),         kv_share_withdraw_message(ids)};
  for (uint64_t c = 0; c < 3000; ++c) {
    fuzz::Rng rng{c};
    json m = good[c % good.size()];
    for (size_t n = 1 + rng.below(3); n > 0; --n) {
      json* target = &m;
      for (const char* list : {"links", "blocks"})
        if (m.contains(list) && m[list].is_array() && !m[list].empty() && rng.below(2))
          target = &m[list][rng.below(m[list].size())];
      mutate(*target, rng);
    }
    try {
      EXPECT_EQ(message_type(answer_kv_share(pool, m)), "kv_shared") << "case " << c;
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("tensor-parallel channel: ", 0), 0u)
          << "case " << c << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace hearth
