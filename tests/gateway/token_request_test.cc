// vLLM's /tokenize and /detokenize bodies as the gateway reads them: the defaults vLLM gives
// (special tokens added to a prompt, not to rendered messages, whose template holds them), what
// a client may override, and the model name kept as asked so NAME:PROFILE reaches the catalog.
// The wrong-type refusals are in openai_request_test.cc.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gateway/api_error.h"
#include "gateway/request_json.h"
#include "gateway/token_request.h"

namespace hearth::gateway {
namespace {

TokenizeRequest tokenize(const std::string& body) {
  return parse_tokenize_request(parse_request_body(body));
}

TEST(TokenizeRequest, APromptGetsSpecialTokensUnlessTheClientSaysNo) {
  const TokenizeRequest r = tokenize(R"({"model": "fortunes:greedy", "prompt": "hi"})");
  EXPECT_EQ(r.model, "fortunes:greedy");
  ASSERT_TRUE(r.prompt);
  EXPECT_EQ(*r.prompt, "hi");
  EXPECT_TRUE(r.add_special_tokens);
  EXPECT_TRUE(r.messages.is_null());
  EXPECT_FALSE(tokenize(R"({"model": "m", "prompt": "hi", "add_special_tokens": false})")
                   .add_special_tokens);
}

TEST(TokenizeRequest, MessagesAreKeptForTheTemplateWithoutSpecialTokensByDefault) {
  const TokenizeRequest r = tokenize(
      R"({"model": "m", "messages": [{"role": "system", "content": "be brief"},
                                     {"role": "user", "content": "hi"}]})");
  EXPECT_FALSE(r.prompt);
  ASSERT_TRUE(r.messages.is_array());
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1]["content"], "hi");
  EXPECT_FALSE(r.add_special_tokens);
  EXPECT_TRUE(r.add_generation_prompt);

  const TokenizeRequest o = tokenize(
      R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
          "add_generation_prompt": false, "add_special_tokens": true})");
  EXPECT_FALSE(o.add_generation_prompt);
  EXPECT_TRUE(o.add_special_tokens);
}

TEST(TokenizeRequest, AnEmptyPromptIsAPromptAndAnEmptyModelIsNot) {
  const TokenizeRequest r = tokenize(R"({"model": "m", "prompt": ""})");
  ASSERT_TRUE(r.prompt);
  EXPECT_EQ(*r.prompt, "");
  try {
    tokenize(R"({"model": "", "prompt": "x"})");
    ADD_FAILURE() << "an empty model name was taken";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "model");
  }
}

TEST(DetokenizeRequest, TokensAreReadInOrder) {
  const DetokenizeRequest r = parse_detokenize_request(
      parse_request_body(R"({"model": "m", "tokens": [5, 0, 2147483647, 5]})"));
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{5, 0, INT32_MAX, 5}));
}

TEST(DetokenizeRequest, TheVocabularyCheckNamesTheFirstIdOutsideIt) {
  check_vocabulary({}, 0, "tokens");  // nothing to check
  try {
    check_vocabulary({1, 9, 10, 11}, 10, "tokens");
    ADD_FAILURE() << "id 10 of a 10-token vocabulary was taken";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "tokens");
    EXPECT_NE(std::string(e.what()).find("token id 10 at position 2"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("(10 tokens)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hearth::gateway
