// The limits every reader of outside JSON shares: nesting depth (counted without parsing, so
// that nothing recurses), UTF-8, messages that never quote the text, and bounded excerpts.
#include "base/json_limits.h"
#include "base/utf8.h"

#include <gtest/gtest.h>

#include <functional>

namespace hearth {
namespace {

std::string nested(int depth) {
  return std::string(size_t(depth), '[') + std::string(size_t(depth), ']');
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const JsonError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no JsonError";
  return "";
}

TEST(JsonLimits, DepthIsCountedOutsideStringsOnly) {
  EXPECT_NO_THROW(check_json_depth(nested(kMaxJsonDepth), "x"));
  EXPECT_NE(error_of([] {
              check_json_depth(nested(kMaxJsonDepth + 1), "x.json");
            }).find("x.json: JSON nested deeper than 64 levels (at byte 64)"),
            std::string::npos);
  // Brackets in strings, also after an escaped quote, are text.
  EXPECT_NO_THROW(check_json_depth("[\"" + std::string(1000, '[') + "\\\"[[[\"]", "x", 2));
  EXPECT_THROW(check_json_depth("[\"\\\\\"[[]]]", "x", 2), JsonError);  // "\\" ends the string
  EXPECT_NO_THROW(parse_json(nested(kMaxEmbeddedJsonDepth), "x", kMaxEmbeddedJsonDepth));
  EXPECT_THROW(parse_json(nested(kMaxEmbeddedJsonDepth + 1), "x", kMaxEmbeddedJsonDepth),
               JsonError);
  // Far too deep for any recursive reader: refused in one pass.
  EXPECT_THROW(parse_json(nested(1000000), "x"), JsonError);
}

TEST(JsonLimits, SyntaxErrorsNameThePlaceButNeverQuoteTheText) {
  const std::string what = error_of([] { parse_json("{\"a\": hunter2}", "secret.json"); });
  EXPECT_NE(what.find("secret.json: invalid JSON: "), std::string::npos) << what;
  EXPECT_NE(what.find("line 1, column 7"), std::string::npos) << what;
  EXPECT_EQ(what.find("hunter2"), std::string::npos) << what;
  EXPECT_EQ(what.find("[json.exception"), std::string::npos) << what;
  const std::string bytes = error_of([] { parse_json("{\"a\": \"\xff\xfe\"}", "x"); });
  EXPECT_FALSE(find_invalid_utf8(bytes)) << bytes;
}

// Issue 21: nlohmann reads a NUL as the end of its input, so "\0{}" was "unexpected end of
// input" and "{}\0..." parsed as {}. Both now name the byte and where it is.
TEST(JsonLimits, NulBytesAndInvalidUtf8AreNamedWithTheirOffset) {
  using namespace std::string_literals;
  EXPECT_NE(error_of([] {
              parse_json("\0{\"a\": 1}"s, "profile.json");
            }).find("profile.json: invalid JSON: contains a NUL byte at offset 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_json("{}\0garbage"s, "x"); }).find("NUL byte at offset 2"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_json("{\"a\": \"b\0\"}"s, "x"); }).find("NUL byte at offset 8"),
            std::string::npos);
  const std::string utf8 = error_of([] { parse_json("{\"a\": \"\xff\"}", "x.json"); });
  EXPECT_NE(utf8.find("x.json: invalid JSON: not valid UTF-8 at offset 7"), std::string::npos)
      << utf8;
  EXPECT_EQ(error_of([] { parse_json("\0"s, "x"); }).find("end of input"), std::string::npos);
}

TEST(JsonLimits, FindsTheFirstByteThatIsNotUtf8) {
  EXPECT_FALSE(find_invalid_utf8("plain, caf\xc3\xa9, \xe2\x82\xac, \xf0\x9f\x98\x80"));
  EXPECT_EQ(find_invalid_utf8("ab\xff"), 2u);
  EXPECT_EQ(find_invalid_utf8("a\xc3"), 1u);             // truncated
  EXPECT_EQ(find_invalid_utf8("\xc0\x80"), 0u);          // overlong NUL
  EXPECT_EQ(find_invalid_utf8("\xe0\x80\x80"), 0u);      // overlong
  EXPECT_EQ(find_invalid_utf8("x\xed\xa0\x80"), 1u);     // a surrogate
  EXPECT_EQ(find_invalid_utf8("\xf4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(find_invalid_utf8("\xe2\x28\xa1"), 0u);      // bad continuation
  EXPECT_EQ(find_invalid_utf8(std::string_view("a\0b", 3)), std::nullopt);
}

TEST(JsonLimits, ExcerptsAreShortValidAndShallow) {
  EXPECT_EQ(json_excerpt(nlohmann::json{{"a", {1, 2}}, {"b", "x"}}), R"({"a":[1,2],"b":"x"})");
  const std::string long_text = json_excerpt(std::string(10000, 'y'), 40);
  EXPECT_LE(long_text.size(), 43u);
  EXPECT_TRUE(long_text.ends_with("..."));
  // Cut inside a two-byte character: the excerpt still ends on a character boundary.
  std::string accents;
  for (int i = 0; i < 100; ++i) accents += "\xc3\xa9";
  EXPECT_FALSE(find_invalid_utf8(json_excerpt(accents, 41)));
  // A value deeper than the excerpt is long is printed only as far as the excerpt goes.
  nlohmann::json deep = 1;
  for (int i = 0; i < 1000; ++i) deep = nlohmann::json::array({std::move(deep)});
  EXPECT_EQ(json_excerpt(deep, 10), std::string(10, '[') + "...");
  EXPECT_EQ(json_excerpt(nlohmann::json("\xff")), "\"\xef\xbf\xbd\"");  // replaced
}

}  // namespace
}  // namespace hearth
