// A request without max_tokens: the model's generation_config.json max_new_tokens is its cap,
// else none; the context left after each prompt is applied where the worker is known
// (CompletionSession, tested end to end in gateway_http_test).

#include <gtest/gtest.h>

#include "gateway/openai_request.h"
#include "gateway/request_json.h"

namespace hearth::gateway {
namespace {

using json = nlohmann::json;

CompletionRequest parse(const std::string& body, const json& generation_config) {
  return parse_completion_request(parse_request_body(body), Endpoint::Completions,
                                  GenerationDefaults::from_generation_config(generation_config));
}

TEST(DefaultMaxTokens, GenerationConfigMaxNewTokensCapsTheDefault) {
  const CompletionRequest r = parse(R"({"model": "m", "prompt": "x"})", {{"max_new_tokens", 7}});
  EXPECT_FALSE(r.max_tokens_given);
  EXPECT_EQ(r.settings.max_tokens, 7);
}

TEST(DefaultMaxTokens, WithoutAConfigNothingButTheContextLimitsIt) {
  const CompletionRequest r = parse(R"({"model": "m", "prompt": "x"})", json::object());
  EXPECT_FALSE(r.max_tokens_given);
  EXPECT_EQ(r.settings.max_tokens, kMaxTokensLimit);
  // A value that is not a positive integer is no cap.
  EXPECT_EQ(parse(R"({"model": "m", "prompt": "x"})", {{"max_new_tokens", 0}}).settings.max_tokens,
            kMaxTokensLimit);
  EXPECT_EQ(
      parse(R"({"model": "m", "prompt": "x"})", {{"max_new_tokens", "9"}}).settings.max_tokens,
      kMaxTokensLimit);
}

TEST(DefaultMaxTokens, TheRequestsOwnValueWins) {
  const CompletionRequest r =
      parse(R"({"model": "m", "prompt": "x", "max_tokens": 30})", {{"max_new_tokens", 7}});
  EXPECT_TRUE(r.max_tokens_given);
  EXPECT_EQ(r.settings.max_tokens, 30);
  const CompletionRequest chat = parse_completion_request(
      parse_request_body(
          R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
              "max_completion_tokens": 3})"),
      Endpoint::ChatCompletions, GenerationDefaults::from_generation_config({}));
  EXPECT_TRUE(chat.max_tokens_given);
  EXPECT_EQ(chat.settings.max_tokens, 3);
}

}  // namespace
}  // namespace hearth::gateway
