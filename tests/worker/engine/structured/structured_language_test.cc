// The structured-output compilers: byte languages, regexes and JSON schemas to automata,
// checked string by string (accepted, refused) and, for number bounds and UTF-8 ranges,
// against a brute-force rule over every value in a window.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "worker/engine/structured/byte_language.h"
#include "worker/engine/structured/grammar.h"
#include "worker/engine/structured/json_schema_language.h"
#include "worker/engine/structured/regex_language.h"

namespace hearth::structured {
namespace {

ByteDfa schema_dfa(const std::string& schema) {
  return ByteDfa::compile(json_schema_language(schema), kMaxGrammarStates);
}

ByteDfa regex_dfa(const std::string& re) {
  return ByteDfa::compile(regex_language(re), kMaxGrammarStates);
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | cp >> 6), s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | cp >> 12), s += char(0x80 | (cp >> 6 & 0x3F)), s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | cp >> 18), s += char(0x80 | (cp >> 12 & 0x3F));
    s += char(0x80 | (cp >> 6 & 0x3F)), s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

TEST(ByteLanguage, Utf8RangesMatchExactlyTheirCodePoints) {
  const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
      {0x41, 0x5A}, {0x7F, 0x800}, {0x3A9, 0x1F600}, {0xFFF0, 0x10010}, {0xD000, 0xE100}};
  std::mt19937 rng(7);
  for (auto [lo, hi] : ranges) {
    const ByteDfa dfa = ByteDfa::compile(utf8_range(lo, hi), kMaxGrammarStates);
    std::vector<uint32_t> probes = {lo,    hi,    lo - 1, hi + 1,  0x7F,   0x80,
                                    0x7FF, 0x800, 0xFFFF, 0x10000, 0xD7FF, 0xE000};
    for (int i = 0; i < 3000; ++i) probes.push_back(rng() % 0x110000);
    for (uint32_t cp : probes) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;  // no UTF-8 encoding
      EXPECT_EQ(dfa.matches(utf8(cp)), cp >= lo && cp <= hi) << std::hex << cp;
    }
    EXPECT_FALSE(dfa.matches("\xED\xA0\x80"));  // an encoded surrogate is never valid
  }
}

TEST(ByteLanguage, RepeatBoundsAndSharedSuffixes) {
  const ByteDfa dfa = ByteDfa::compile(seq({literal("a"), repeat(literal("b"), 2, 4)}), 100);
  EXPECT_FALSE(dfa.matches("ab"));
  EXPECT_TRUE(dfa.matches("abb"));
  EXPECT_TRUE(dfa.matches("abbbb"));
  EXPECT_FALSE(dfa.matches("abbbbb"));
  EXPECT_THROW(ByteDfa::compile(repeat(byte_range(0, 255), 0, 5000), 1000), LanguageTooLarge);
}

TEST(RegexLanguage, AcceptsAndRefusesWholeStrings) {
  const ByteDfa phone = regex_dfa(R"(^\d{3}-\d{4}$)");
  EXPECT_TRUE(phone.matches("555-1234"));
  EXPECT_FALSE(phone.matches("555-12345"));
  EXPECT_FALSE(phone.matches("5551234"));
  const ByteDfa word = regex_dfa("(?:cat|dog)s?[!.]*");
  for (const char* ok : {"cat", "dogs", "cats!!.", "dog."}) EXPECT_TRUE(word.matches(ok)) << ok;
  for (const char* no : {"", "cow", "catss", "dog?"}) EXPECT_FALSE(word.matches(no)) << no;
  const ByteDfa neg = regex_dfa("[^a-c\\d]+");
  EXPECT_TRUE(neg.matches("xyz\xC3\xA9"));
  EXPECT_FALSE(neg.matches("xbz"));
  EXPECT_FALSE(neg.matches("x1"));
  const ByteDfa dot = regex_dfa("a.c");
  EXPECT_TRUE(
      dot.matches("a\xE2\x82\xAC"
                  "c"));
  EXPECT_FALSE(dot.matches("a\nc"));
  EXPECT_FALSE(
      dot.matches("a\xFF"
                  "c"));
}

TEST(RegexLanguage, RefusesWhatItDoesNotSupportByName) {
  for (const char* bad : {"(a)\\1", "(?=a)b", "a\\b", "a*?", "(a", "[a-", "a{2,1}", "*a", "x{5000}",
                          "a^b", "\\p{L}"}) {
    EXPECT_THROW(regex_language(bad), RegexError) << bad;
  }
  try {
    regex_language("(?<name>a)");
    FAIL();
  } catch (const RegexError& e) {
    EXPECT_NE(std::string(e.what()).find("byte 1"), std::string::npos) << e.what();
  }
}

TEST(RegexLanguage, HostileNestingIsRefusedNotRecursedOrExpanded) {
  EXPECT_THROW(regex_language(std::string(5000, '(') + "a" + std::string(5000, ')')), RegexError);
  EXPECT_NO_THROW(regex_language(std::string(60, '(') + "a" + std::string(60, ')')));
  // Each repeat is allowed; together they pass the state limit and are refused.
  EXPECT_THROW(ByteDfa::compile(regex_language("((a{1000}){1000}){1000}"), kMaxGrammarStates),
               LanguageTooLarge);
}

TEST(JsonSchemaLanguage, ObjectsFollowTheSchemaOrderAndRequiredProperties) {
  const ByteDfa dfa = schema_dfa(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 5}, "age": {"type": "integer"},
      "ok": {"type": "boolean"}}, "required": ["name", "ok"], "additionalProperties": false})");
  for (const char* good :
       {R"({"name":"Al","ok":true})", R"({"name":"","age":-3,"ok":false})",
        R"({ "name": "ab\"c" ,"ok":true})", "{\"name\":\"\xC3\xA9t\xC3\xA9\",\"ok\":true}",
        R"({"name":"\u00e9","age":0,"ok":true})"})
    EXPECT_TRUE(dfa.matches(good)) << good;
  for (const char* bad : {R"({"ok":true,"name":"Al"})",       // out of order
                          R"({"name":"Al"})",                 // ok missing
                          R"({"name":"toolong","ok":true})",  // maxLength
                          R"({"name":"Al","age":01,"ok":true})", R"({"name":"Al","ok":true,})",
                          R"({"name":"Al","x":1,"ok":true})", R"({"name":"\ud800","ok":true})",
                          "{\"name\":\"a\nb\",\"ok\":true}", R"({"name":"Al","ok":true}   )"})
    EXPECT_FALSE(dfa.matches(bad)) << bad;
}

TEST(JsonSchemaLanguage, ArraysEnumsConstsAndTypeLists) {
  const ByteDfa arr = schema_dfa(
      R"({"type":"array","items":{"enum":["a",1,null,{"k":[true]}]},"minItems":1,"maxItems":3})");
  EXPECT_TRUE(arr.matches(R"(["a"])"));
  EXPECT_TRUE(arr.matches(R"([1, null,{"k":[true]}])"));
  EXPECT_FALSE(arr.matches("[]"));
  EXPECT_FALSE(arr.matches(R"(["a","a","a","a"])"));
  EXPECT_FALSE(arr.matches(R"(["b"])"));
  const ByteDfa types = schema_dfa(R"({"type":["string","null"],"minLength":2})");
  EXPECT_TRUE(types.matches("null"));
  EXPECT_TRUE(types.matches(R"("ab")"));
  EXPECT_FALSE(types.matches(R"("a")"));
  const ByteDfa any_of = schema_dfa(R"({"anyOf":[{"const":42},{"type":"boolean"}]})");
  EXPECT_TRUE(any_of.matches("42"));
  EXPECT_TRUE(any_of.matches("false"));
  EXPECT_FALSE(any_of.matches("43"));
}

// Every integer in a window around the bounds: accepted exactly when within them.
TEST(JsonSchemaLanguage, IntegerBoundsMatchBruteForce) {
  const std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> cases = {
      {R"("minimum": 0, "maximum": 100)", {0, 100}},
      {R"("minimum": -57, "maximum": 1234)", {-57, 1234}},
      {R"("minimum": -1000, "maximum": -7)", {-1000, -7}},
      {R"("minimum": 7)", {7, INT64_MAX}},
      {R"("maximum": -13)", {INT64_MIN, -13}},
      {R"("exclusiveMinimum": 9, "exclusiveMaximum": 99.5)", {10, 99}},
      {R"("minimum": 0.5, "maximum": 1999)", {1, 1999}}};
  for (const auto& [bounds, range] : cases) {
    const ByteDfa dfa = schema_dfa(R"({"type":"integer",)" + bounds + "}");
    for (int64_t v = -2100; v <= 2100; ++v)
      EXPECT_EQ(dfa.matches(std::to_string(v)), v >= range.first && v <= range.second)
          << bounds << " " << v;
    EXPECT_EQ(dfa.matches("123456789"), range.second == INT64_MAX) << bounds;
    EXPECT_FALSE(dfa.matches("-0")) << bounds;
    EXPECT_FALSE(dfa.matches("007")) << bounds;
  }
}

TEST(JsonSchemaLanguage, NumberBoundsMatchBruteForce) {
  const ByteDfa dfa = schema_dfa(R"({"type":"number","minimum":-3,"maximum":12})");
  for (int tenths = -500; tenths <= 500; ++tenths) {
    const double v = tenths / 10.0;
    const std::string s = (tenths < 0 ? "-" : "") + std::to_string(std::abs(tenths) / 10) + "." +
                          std::to_string(std::abs(tenths) % 10);
    EXPECT_EQ(dfa.matches(s), v >= -3 && v <= 12) << s;
  }
  EXPECT_TRUE(dfa.matches("12"));
  EXPECT_TRUE(dfa.matches("12.000"));
  EXPECT_FALSE(dfa.matches("12.0001"));
  EXPECT_FALSE(dfa.matches("1e1"));  // bounded numbers are written without an exponent
  const ByteDfa any = schema_dfa(R"({"type":"number"})");
  for (const char* ok : {"0", "-0.5", "1e10", "3.25E-2", "17"}) EXPECT_TRUE(any.matches(ok)) << ok;
  for (const char* no : {"01", ".5", "1.", "+1", "1e", "NaN"}) EXPECT_FALSE(any.matches(no)) << no;
}

TEST(JsonSchemaLanguage, JsonObjectIsAnyObjectWithinTheDepth) {
  const ByteDfa dfa = ByteDfa::compile(json_object_language(), kMaxGrammarStates);
  EXPECT_TRUE(dfa.matches("{}"));
  EXPECT_TRUE(dfa.matches(R"({"a": [1, {"b": null}, "x"], "c": {"d": -2.5e3}})"));
  EXPECT_FALSE(dfa.matches("[]"));
  EXPECT_FALSE(dfa.matches(R"({"a": })"));
  std::string deep = "1";
  for (int d = 1; d < kMaxJsonObjectDepth; ++d) deep = "[" + deep + "]";
  EXPECT_TRUE(dfa.matches(R"({"a":)" + deep + "}"));
  EXPECT_FALSE(dfa.matches(R"({"a":[)" + deep + "]}"));
}

TEST(JsonSchemaLanguage, RefusesUnsupportedKeywordsByName) {
  for (const char* kw : {"pattern", "format", "$ref", "allOf", "oneOf", "not", "uniqueItems",
                         "patternProperties", "multipleOf", "prefixItems"}) {
    const std::string schema = std::string(R"({"type":"string",")") + kw + R"(":"x"})";
    try {
      json_schema_language(schema);
      ADD_FAILURE() << kw;
    } catch (const SchemaError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + kw + "'"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(
      json_schema_language(R"({"type":"object","additionalProperties":{"type":"string"}})"),
      SchemaError);
  EXPECT_THROW(json_schema_language(R"({"type":"strng"})"), SchemaError);
  EXPECT_THROW(json_schema_language(R"({"type":"number","minimum":0.5})"), SchemaError);
  EXPECT_THROW(json_schema_language("{not json"), SchemaError);
}

TEST(JsonSchemaLanguage, ASchemaPastTheStateLimitIsRefusedNotHung) {
  // Two long strings in sequence: compiled within the limit or refused, never unbounded.
  const LangPtr big = json_schema_language(
      R"({"type":"array","items":{"type":"string","maxLength":400},"minItems":200})");
  EXPECT_THROW(ByteDfa::compile(big, kMaxGrammarStates), LanguageTooLarge);
}

}  // namespace
}  // namespace hearth::structured
