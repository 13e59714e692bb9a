// UTF-8 repair (batch and incremental), the Oniguruma-compatible regex layer, and the Unicode
// classes the pipeline relies on.

#include <gtest/gtest.h>

#include <random>

#include "regex.h"
#include "unicode.h"
#include "utf8.h"

namespace hearth::tok {
namespace {

const std::string R = "\xEF\xBF\xBD";  // U+FFFD

TEST(Utf8, RepairReplacesEachMaximalIllFormedSubsequence) {
  // Expectations are those of Python's bytes.decode("utf-8", "replace").
  EXPECT_EQ(repair_utf8("plain ascii"), "plain ascii");
  EXPECT_EQ(repair_utf8("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(repair_utf8("\xFF"), R);
  EXPECT_EQ(repair_utf8("\xC0\xAF"), R + R);                  // overlong lead: each byte
  EXPECT_EQ(repair_utf8("\xE0\x80\x80"), R + R + R);          // overlong 3-byte
  EXPECT_EQ(repair_utf8("\xED\xA0\x80"), R + R + R);          // surrogate
  EXPECT_EQ(repair_utf8("\xF4\x90\x80\x80"), R + R + R + R);  // above U+10FFFF
  EXPECT_EQ(repair_utf8("\xF0\x9F\x98"), R);                  // truncated: one for the prefix
  EXPECT_EQ(repair_utf8("\xF0\x9F\x98"
                        "a"),
            R + "a");
  EXPECT_EQ(repair_utf8("\xE2\x28\xA1"), R + "(" + R);
  EXPECT_EQ(repair_utf8("\x80\x80"), R + R);
  EXPECT_EQ(repair_utf8(std::string("a\0b", 3)), std::string("a\0b", 3));
}

TEST(Utf8, IncrementalRepairEqualsBatchForAnySplit) {
  std::mt19937 rng(99);
  const std::string pieces[] = {"a",        "\xC3", "\xA9",     "\xE4\xB8", "\xAD", "\xF0\x9F",
                                "\x98\x80", "\xFF", "\xED\xA0", "\x80",     "\xC0"};
  for (int trial = 0; trial < 2000; ++trial) {
    std::string all;
    Utf8Repairer repairer;
    std::string out;
    for (int k = rng() % 12; k > 0; --k) {
      const std::string& p = pieces[rng() % std::size(pieces)];
      all += p;
      repairer.push(p, out);
      ASSERT_TRUE(is_valid_utf8(out));
    }
    repairer.finish(out);
    ASSERT_EQ(out, repair_utf8(all)) << ::testing::PrintToString(all);
  }
}

TEST(Utf8, ValidationAgreesWithRepair) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 5000; ++trial) {
    std::string s(rng() % 6, '\0');
    for (char& c : s) c = static_cast<char>(0x7E + rng() % 0x82);
    EXPECT_EQ(is_valid_utf8(s), repair_utf8(s) == s) << ::testing::PrintToString(s);
  }
}

std::vector<std::string> matches(const Regex& re, const std::string& s) {
  std::vector<std::string> out;
  re.for_each_match(s, [&](size_t b, size_t e) { out.push_back(s.substr(b, e - b)); });
  return out;
}

TEST(Regex, WhitespaceAndWordClassesFollowOniguruma) {
  // U+180E is whitespace to PCRE2 but not to Oniguruma (nor to Unicode since 6.3).
  EXPECT_TRUE(matches(Regex(R"(\s+)"),
                      "a\xE1\xA0\x8E"
                      "b")
                  .empty());
  EXPECT_EQ(matches(Regex(R"(\s+)"),
                    "a\xE3\x80\x80\xC2\x85"
                    "b"),
            std::vector<std::string>{"\xE3\x80\x80\xC2\x85"});
  EXPECT_EQ(matches(Regex(R"([^\s\p{L}]+)"),
                    "a\xE1\xA0\x8E"
                    "b"),
            std::vector<std::string>{"\xE1\xA0\x8E"});
  EXPECT_EQ(matches(Regex(R"(\S+)"), "x\xE1\xA0\x8Ey z"),
            (std::vector<std::string>{"x\xE1\xA0\x8Ey", "z"}));
  // \w includes combining marks and connector punctuation.
  EXPECT_EQ(matches(Regex(R"(\w+)"),
                    "e\xCC\x81\xE2\x80\xBF"
                    "x-y"),
            (std::vector<std::string>{"e\xCC\x81\xE2\x80\xBF"
                                      "x",
                                      "y"}));
  // Ruby syntax: ^ and $ are line anchors.
  EXPECT_EQ(matches(Regex("^a"), "a\na\nba"), (std::vector<std::string>{"a", "a"}));
  // A quoted \Q...\E section is literal.
  EXPECT_EQ(matches(Regex(R"(\Q\s+\E)"), "\\s+ \\s"), std::vector<std::string>{"\\s+"});
  // ']' first in a class is a member.
  EXPECT_EQ(matches(Regex(R"([]\s]+)"), "a] ]b"), std::vector<std::string>{"] ]"});
}

TEST(Regex, EmptyMatchesAdvanceLikeTheReference) {
  // No empty match right after a non-empty one; otherwise one per position.
  EXPECT_EQ(matches(Regex("a*"), "baa"), (std::vector<std::string>{"", "aa"}));
  EXPECT_EQ(matches(Regex("x*"), "ab"), (std::vector<std::string>{"", "", ""}));
}

TEST(Regex, InvalidPatternIsReported) {
  try {
    Regex bad("(unclosed");
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("(unclosed"), std::string::npos) << e.what();
  }
}

TEST(Unicode, NfcComposesAndLeavesStableTextAlone) {
  EXPECT_EQ(nfc("e\xCC\x81"), "\xC3\xA9");
  EXPECT_EQ(nfc("\xE2\x84\xAB"), "\xC3\x85");                              // ANGSTROM SIGN -> Å
  EXPECT_EQ(nfc("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB"), "\xED\x95\x9C");  // jamo -> 한
  // The fast path skips utf8proc below U+0300; check that utf8proc agrees there by forcing
  // the slow path with a CJK character after each one.
  for (uint32_t cp = 0; cp < 0x300; ++cp) {
    std::string s;
    append_utf8(s, cp);
    s += "\xE4\xB8\x80";
    ASSERT_EQ(nfc(s), s) << "U+" << std::hex << cp;
  }
}

TEST(Unicode, CharacterClasses) {
  EXPECT_TRUE(is_white_space(0x3000));
  EXPECT_TRUE(is_white_space(0x85));
  EXPECT_FALSE(is_white_space(0x180E));
  EXPECT_FALSE(is_white_space(0x200B));
  EXPECT_TRUE(is_word_char(0x301));   // combining acute
  EXPECT_TRUE(is_word_char(0x4E2D));  // 中
  EXPECT_FALSE(is_word_char('-'));
  EXPECT_TRUE(is_numeric(0x0663));  // Arabic-Indic three
  EXPECT_TRUE(is_numeric(0x00BD));  // ½
  EXPECT_FALSE(is_numeric('x'));
}

}  // namespace
}  // namespace hearth::tok
