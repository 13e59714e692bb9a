// base/utf8.h, the one UTF-8 definition: every code point round-trips through append_utf8 and
// utf8_char_length, and the ill-formed sequences of Unicode's table 3-7 are refused by all three
// views of it (char length, find_invalid_utf8, is_valid_utf8).
#include "base/utf8.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace hearth {
namespace {

TEST(Utf8, EveryScalarValueRoundTrips) {
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;  // surrogates are not scalar values
    std::string s;
    append_utf8(s, cp);
    const size_t want = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    ASSERT_EQ(s.size(), want) << std::hex << uint32_t(cp);
    ASSERT_EQ(utf8_char_length(s), want) << std::hex << uint32_t(cp);
    ASSERT_FALSE(find_invalid_utf8(s)) << std::hex << uint32_t(cp);
  }
}

TEST(Utf8, IllFormedSequencesAreRefusedAtTheirFirstByte) {
  const struct {
    std::string bytes;
    size_t at;
  } cases[] = {{"ok\x80", 2},           {"\xc0\xaf", 0},     {"\xc1\xbf", 0},
               {"a\xe0\x9f\xbf", 1},    {"\xed\xa0\x80", 0}, {"\xf0\x8f\xbf\xbf", 0},
               {"\xf4\x90\x80\x80", 0}, {"\xf5\x80", 0},     {"abcdefgh\xe2\x82", 8},
               {"\xe2\x28\xa1", 0}};
  for (const auto& c : cases) {
    EXPECT_EQ(find_invalid_utf8(c.bytes), c.at) << ::testing::PrintToString(c.bytes);
    EXPECT_FALSE(is_valid_utf8(c.bytes));
    EXPECT_EQ(utf8_char_length(std::string_view(c.bytes).substr(c.at)), 0u);
  }
  EXPECT_EQ(utf8_char_length(""), 0u);
  EXPECT_TRUE(is_valid_utf8(std::string("long ascii run, then caf\xc3\xa9 and \xf0\x9f\x98\x80")));
}

}  // namespace
}  // namespace hearth
