// printable() and is_valid_utf8(): what may be quoted from a peer's bytes into a reply or a log.
#include "ipc/printable.h"

#include <gtest/gtest.h>

#include <string>

#include "ipc/frame.h"
#include "ipc/protocol.h"

namespace hearth::ipc {
namespace {

TEST(Printable, WellFormedUtf8PassesUnchanged) {
  for (const std::string text : {"", "plain ascii", "caf\xc3\xa9", "\xe2\x82\xac 10",
                                 "\xf0\x9f\x94\xa5 fire", "\xf4\x8f\xbf\xbf"}) {
    EXPECT_TRUE(is_valid_utf8(text)) << text;
    EXPECT_EQ(printable(text), text);
  }
}

TEST(Printable, EveryIllFormedSequenceIsRefusedAndEscaped) {
  const std::pair<std::string, std::string> cases[] = {
      {"\xff", "\\xff"},                             // never valid
      {"\x80", "\\x80"},                             // a stray continuation byte
      {"a\xc3", "a\\xc3"},                           // truncated at the end
      {"\xc3(", "\\xc3("},                           // a lead byte without its continuation
      {"\xc0\xaf", "\\xc0\\xaf"},                    // overlong '/'
      {"\xe0\x80\xaf", "\\xe0\\x80\\xaf"},           // overlong, three bytes
      {"\xed\xa0\x80", "\\xed\\xa0\\x80"},           // a UTF-16 surrogate
      {"\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"},  // above U+10FFFF
      {"\xf5\x80\x80\x80", "\\xf5\\x80\\x80\\x80"},  // lead byte out of range
  };
  for (const auto& [bad, escaped] : cases) {
    EXPECT_FALSE(is_valid_utf8(bad)) << escaped;
    EXPECT_EQ(printable(bad), escaped);
    EXPECT_TRUE(is_valid_utf8(printable(bad)));
  }
}

TEST(Printable, ControlCharactersAreEscapedSoALogLineStaysOneLine) {
  EXPECT_EQ(printable("name\nforged line\r\x1b[2J\x7f"), "name\\x0aforged line\\x0d\\x1b[2J\\x7f");
  EXPECT_EQ(printable(std::string("nul\0byte", 8)), "nul\\x00byte");
}

TEST(Printable, CutsAtACharacterBoundary) {
  EXPECT_EQ(printable("abcdef", 4), "abcd...");
  EXPECT_EQ(printable("ab\xc3\xa9z", 3), "ab...");  // the two-byte character does not fit
  EXPECT_EQ(printable("a\xff", 2), "a...");         // nor does a four-byte escape
  EXPECT_EQ(printable("abc", 3), "abc");
}

// Whatever the message quotes, an error reply can be encoded and says what it quotes.
TEST(Printable, ErrorRepliesCarryAnyMessage) {
  const std::string frame =
      encode_frame(make_error_reply(7, ErrorCode::kBadRequest, "last read: '\xff\xfe'"));
  EXPECT_NE(frame.find("last read: '\\\\xff\\\\xfe'"), std::string::npos) << frame;
  const std::string huge(1 << 20, 'x');
  const auto reply = make_error_reply(std::nullopt, ErrorCode::kInternal, huge);
  EXPECT_EQ(reply["error"]["message"].get<std::string>().size(), kMaxErrorMessageBytes + 3);
}

}  // namespace
}  // namespace hearth::ipc
