// The prefix KV shared across workers, as /metrics reports it (issue 22 item 4): a real gateway
// with two CPU workers of one served model (the default profile and the README's "small",
// which share a cache domain), a prompt sent to one and then to the other, and the exposition
// text read by the strict reader. The second worker's cache is cold, so every prompt token it
// reports cached came from the first worker's shared blocks: the hit counters must say exactly
// that, in whole blocks, and no more blocks can have been found than were published.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/gateway/gateway_process.h"
#include "tests/gateway/prometheus_text.h"

namespace hearth::test {
namespace {

TEST(GatewayKvShareMetrics, HitsAreTheSecondWorkersCachedTokensInWholeBlocks) {
  const auto small = source_dir() / "gateway/profiles/engine-small.json";
  GatewayProcess gw({"--profile", "small=" + small.string()});
  const std::string prompt =
      "The lighthouse keeper counted the ships that passed each night, and wrote their names "
      "in a book that nobody else had ever read, until one winter a child climbed the stairs "
      "and asked him why the ships never stopped at the island";
  std::vector<json> replies;
  for (const char* model : {"fortunes", "fortunes:small"}) {
    const auto r =
        gw.post("/v1/completions",
                {{"model", model}, {"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}});
    ASSERT_EQ(r.status, 200) << r.body;
    replies.push_back(r.parsed());
  }
  ASSERT_GT(replies[1]["usage"]["prompt_tokens"].get<int>(), 32);
  const int cached = replies[1]["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  // Served workers share by default (kv_share): the first worker's full blocks, all but the
  // prompt's last token.
  EXPECT_GE(cached, 48);
  EXPECT_EQ(cached % 16, 0);

  const PromText text(gw.get("/metrics").body);
  for (const char* family : {"hearth:kv_share_hit_tokens_total", "hearth:kv_share_hit_blocks_total",
                             "hearth:kv_share_published_blocks_total"})
    EXPECT_EQ(text.type(family), "counter") << family;
  const std::map<std::string, std::string> model = {{"model_name", "fortunes"}};
  const double hit_tokens = text.value("hearth:kv_share_hit_tokens_total", model);
  const double hit_blocks = text.value("hearth:kv_share_hit_blocks_total", model);
  const double published = text.value("hearth:kv_share_published_blocks_total", model);
  ASSERT_FALSE(std::isnan(hit_tokens) || std::isnan(hit_blocks) || std::isnan(published));
  EXPECT_EQ(hit_tokens, cached);
  EXPECT_EQ(hit_blocks * 16, hit_tokens);
  EXPECT_GE(published, hit_blocks);
}

}  // namespace
}  // namespace hearth::test
