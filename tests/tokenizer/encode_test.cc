// Encoding rules on small hand-written tokenizer.json documents, where each expected id list
// can be worked out by hand: merge order, ignore_merges, byte fallback, unknown tokens,
// subword decorations, added-token flags, normalizers and pre-tokenizers.

#include <gtest/gtest.h>

#include <random>

#include "pattern.h"
#include "tokenizer_test_util.h"
#include "utf8.h"

namespace hearth::tok::testing {
namespace {

// Vocabulary helper: ids of tokens by spelling, so expectations read as text.
std::vector<int32_t> ids(const Tokenizer& tok, const std::vector<std::string>& tokens) {
  std::vector<int32_t> out;
  for (const std::string& t : tokens) {
    const std::optional<int32_t> id = tok.token_to_id(t);
    EXPECT_TRUE(id.has_value()) << "no token " << t;
    out.push_back(id.value_or(-1));
  }
  return out;
}

std::vector<std::string> letters() {
  std::vector<std::string> v;
  for (char c = 'a'; c <= 'z'; ++c) v.emplace_back(1, c);
  for (const char* s : {" ", "\xE2\x96\x81", "<", ">", "@", "0", "1", "2", "3"}) v.emplace_back(s);
  return v;
}

TEST(BpeModel, MergesApplyByRankNotByPosition) {
  json config = toy_config({"a", "b", "c", "ab", "bc", "abc"}, {"b c", "a b", "a bc"});
  Tokenizer tok = load(config);
  EXPECT_EQ(tok.encode("abc", false), ids(tok, {"abc"}));  // b+c first (rank 0), then a+bc
  config["model"]["merges"] = {"a b", "b c"};
  tok = load(config);
  EXPECT_EQ(tok.encode("abc", false), ids(tok, {"ab", "c"}));  // no "ab c" merge exists
  config["model"]["merges"] = {"b c", "a b"};
  tok = load(config);
  EXPECT_EQ(tok.encode("abc", false), ids(tok, {"a", "bc"}));
}

TEST(BpeModel, EqualRanksMergeLeftmostFirst) {
  const Tokenizer tok = load(toy_config({"a", "aa", "aaaa"}, {"a a", "aa aa"}));
  EXPECT_EQ(tok.encode("aaa", false), ids(tok, {"aa", "a"}));
  EXPECT_EQ(tok.encode("aaaaa", false), ids(tok, {"aaaa", "a"}));
  EXPECT_EQ(tok.encode("aaaaaa", false), ids(tok, {"aaaa", "aa"}));
}

TEST(BpeModel, MergesGivenAsPairsAndDuplicatesKeepTheLastRank) {
  json config = toy_config({"a", "b", "c", "ab", "bc"}, {});
  config["model"]["merges"] =
      json::array({json::array({"a", "b"}), json::array({"b", "c"}), json::array({"a", "b"})});
  const Tokenizer tok = load(config);
  // "a b" is listed again after "b c", so it ranks below it, as in the reference.
  EXPECT_EQ(tok.encode("abc", false), ids(tok, {"a", "bc"}));
}

TEST(BpeModel, IgnoreMergesTakesAWordThatIsAToken) {
  json config = toy_config({"a", "b", "c", "abc"}, {});
  EXPECT_EQ(load(config).encode("abc", false), std::vector<int32_t>({0, 1, 2}));
  config["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(config).encode("abc", false), std::vector<int32_t>({3}));
  EXPECT_EQ(load(config).encode("cab", false), std::vector<int32_t>({2, 0, 1}));
}

TEST(BpeModel, ByteFallbackSpellsUnknownCharactersAsBytes) {
  std::vector<std::string> vocab = {"a"};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab.emplace_back(name);
  }
  json config = toy_config(vocab, {});
  config["model"]["byte_fallback"] = true;
  const Tokenizer tok = load(config);
  EXPECT_EQ(tok.encode("a\xC3\xA9"
                       "a",
                       false),
            ids(tok, {"a", "<0xC3>", "<0xA9>", "a"}));
  EXPECT_EQ(tok.encode("\xF0\x9F\x98\x80", false),
            ids(tok, {"<0xF0>", "<0x9F>", "<0x98>", "<0x80>"}));
}

TEST(BpeModel, UnknownCharactersFuseOnlyWhenAsked) {
  json config = toy_config({"<unk>", "a"}, {});
  config["model"]["unk_token"] = "<unk>";
  const std::string text =
      "a\xC3\xA9\xC3\xA9"
      "a\xC3\xA9";
  config["model"]["fuse_unk"] = true;
  EXPECT_EQ(load(config).encode(text, false), std::vector<int32_t>({1, 0, 1, 0}));
  config["model"]["fuse_unk"] = false;
  EXPECT_EQ(load(config).encode(text, false), std::vector<int32_t>({1, 0, 0, 1, 0}));
  config["model"]["unk_token"] = nullptr;  // without an unknown token the character vanishes
  EXPECT_EQ(load(config).encode(text, false), std::vector<int32_t>({1, 1}));
}

TEST(BpeModel, SubwordPrefixAndWordSuffixDecorateSymbols) {
  json config = toy_config({"h", "##e", "##y</w>", "he", "hey</w>", "y</w>", "##e</w>"},
                           {"h ##e", "he ##y</w>"});
  config["model"]["continuing_subword_prefix"] = "##";
  config["model"]["end_of_word_suffix"] = "</w>";
  const Tokenizer tok = load(config);
  EXPECT_EQ(tok.encode("hey", false), ids(tok, {"hey</w>"}));
  EXPECT_EQ(tok.encode("hy", false), ids(tok, {"h", "##y</w>"}));
  EXPECT_EQ(tok.encode("y", false), ids(tok, {"y</w>"}));
}

TEST(AddedTokens, SplitTheRawTextLeftmostLongest) {
  json config = toy_config(letters(), {});
  config["added_tokens"] = {
      {{"id", 100}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
      {{"id", 36}, {"content", "<a>"}, {"special", false}, {"normalized", false}},
      {{"id", 37}, {"content", "<a>b"}, {"special", false}, {"normalized", false}},
  };
  config["model"]["vocab"]["<s>"] = 100;  // already in the vocabulary: keeps its id
  const Tokenizer tok = load(config);
  EXPECT_EQ(tok.encode("x<s>y", false), ids(tok, {"x", "<s>", "y"}));
  EXPECT_EQ(tok.encode("<a>bc<a>", false), ids(tok, {"<a>b", "c", "<a>"}));
  EXPECT_EQ(tok.token_to_id("<a>b"), 37);
  EXPECT_TRUE(tok.is_special(100));
  EXPECT_FALSE(tok.is_special(36));
  EXPECT_EQ(tok.decode(tok.encode("x<s>y", false), true), "x y");  // joined with spaces
}

TEST(AddedTokens, StripFlagsAbsorbWhitespace) {
  json config = toy_config(letters(), {});
  config["added_tokens"] = {
      {{"id", 35}, {"content", "<m>"}, {"lstrip", true}, {"rstrip", true}, {"normalized", false}},
      {{"id", 36}, {"content", "<l>"}, {"lstrip", true}, {"normalized", false}},
  };
  const Tokenizer tok = load(config);
  EXPECT_EQ(tok.encode("a \t <m> \n b", false), ids(tok, {"a", "<m>", "b"}));
  EXPECT_EQ(tok.encode("a  <l>  b", false), ids(tok, {"a", "<l>", " ", " ", "b"}));
  // Unicode whitespace (U+3000) counts too.
  EXPECT_EQ(tok.encode("a\xE3\x80\x80<m>", false), ids(tok, {"a", "<m>"}));
}

TEST(AddedTokens, SingleWordOnlyMatchesWholeWords) {
  json config = toy_config(letters(), {});
  config["added_tokens"] = {
      {{"id", 35}, {"content", "ab"}, {"single_word", true}, {"normalized", false}}};
  const Tokenizer tok = load(config);
  EXPECT_EQ(tok.encode("ab c", false), ids(tok, {"ab", " ", "c"}));
  EXPECT_EQ(tok.encode("xab", false), ids(tok, {"x", "a", "b"}));
  EXPECT_EQ(tok.encode("abx", false), ids(tok, {"a", "b", "x"}));
  EXPECT_EQ(tok.encode("<ab>", false), ids(tok, {"<", "ab", ">"}));
  // A combining mark after the token makes it part of a word.
  EXPECT_EQ(tok.encode("ab\xCC\x81", false).front(), tok.token_to_id("a"));
}

TEST(AddedTokens, NormalizedTokensMatchNormalizedText) {
  json config = toy_config(letters(), {});
  config["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", "@"}}}, {"content", "ab"}};
  config["added_tokens"] = {
      {{"id", 35}, {"content", "ab"}, {"normalized", true}},
      {{"id", 36}, {"content", "@"}, {"normalized", false}},
  };
  Tokenizer tok = load(config);
  EXPECT_EQ(tok.encode("x@y", false), ids(tok, {"x", "@", "y"}));  // raw token wins first
  config["added_tokens"] = {{{"id", 35}, {"content", "ab"}, {"normalized", true}}};
  tok = load(config);
  EXPECT_EQ(tok.encode("x@y", false), ids(tok, {"x", "ab", "y"}));
  EXPECT_EQ(tok.token_to_id("ab"), 35);
}

TEST(Normalizers, PrependReplaceAndNfc) {
  json config = toy_config(letters(), {});
  config["model"]["vocab"]["\xC3\xA9"] = 200;
  config["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "NFC"}},
        {{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}};
  const Tokenizer tok = load(config);
  EXPECT_EQ(tok.encode("e\xCC\x81 a", false),
            ids(tok, {"\xE2\x96\x81", "\xC3\xA9", "\xE2\x96\x81", "a"}));
  EXPECT_TRUE(tok.encode("", false).empty());  // nothing to prepend to
}

TEST(PreTokenizers, MetaspacePrependSchemes) {
  json config = toy_config(letters(), {});
  config["added_tokens"] = {
      {{"id", 35}, {"content", "<s>"}, {"special", true}, {"normalized", false}}};
  const std::string m = "\xE2\x96\x81";
  config["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "first"}, {"split", false}};
  Tokenizer tok = load(config);
  EXPECT_EQ(tok.encode("hi", false), ids(tok, {m, "h", "i"}));
  // After a leading special token the text no longer starts the input: no prefix.
  EXPECT_EQ(tok.encode("<s>hi", false), ids(tok, {"<s>", "h", "i"}));
  EXPECT_EQ(tok.encode(" hi", false), ids(tok, {m, "h", "i"}));  // the space becomes it
  config["pre_tokenizer"]["prepend_scheme"] = "always";
  tok = load(config);
  EXPECT_EQ(tok.encode("<s>hi", false), ids(tok, {"<s>", m, "h", "i"}));
  config["pre_tokenizer"]["prepend_scheme"] = "never";
  tok = load(config);
  EXPECT_EQ(tok.encode("hi", false), ids(tok, {"h", "i"}));
}

TEST(PreTokenizers, MetaspaceSplitKeepsTheMarkWithTheNextWord) {
  json config = toy_config(letters(), {});
  const std::string m = "\xE2\x96\x81";
  config["model"]["vocab"][m + "a"] = 300;
  config["model"]["ignore_merges"] = true;  // a whole word that is a token shows the split
  config["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "always"}, {"split", true}};
  const Tokenizer tok = load(config);
  EXPECT_EQ(tok.encode("a  a", false), ids(tok, {m + "a", m, m + "a"}));
}

TEST(PreTokenizers, DigitsIndividualOrContiguous) {
  json config = toy_config(letters(), {});
  config["model"]["vocab"]["12"] = 300;
  config["model"]["ignore_merges"] = true;
  config["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", false}};
  EXPECT_EQ(load(config).encode("a12", false), std::vector<int32_t>({0, 300}));
  config["pre_tokenizer"]["individual_digits"] = true;
  const Tokenizer tok = load(config);
  EXPECT_EQ(tok.encode("a12", false), ids(tok, {"a", "1", "2"}));
}

// The five delimiter behaviours on the reference's own example: "How are you doing?" split
// with the inverted pattern \w+|[^\w\s]+ (so the spaces are the delimiters).
TEST(SplitBehavior, MatchesTheReferenceExamples) {
  const std::string text = "How are you doing?";
  const Regex regex(R"(\w+|[^\w\s]+)");
  std::vector<Segment> segments;
  size_t prev = 0;
  regex.for_each_match(text, [&](size_t b, size_t e) {
    if (prev != b) segments.push_back({prev, b, true});
    segments.push_back({b, e, false});
    prev = e;
  });
  auto split = [&](SplitBehavior behavior) {
    std::vector<std::pair<size_t, size_t>> pieces;
    apply_split_behavior(segments, behavior, pieces);
    std::vector<std::string> out;
    for (const auto& [b, e] : pieces) out.push_back(text.substr(b, e - b));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split(SplitBehavior::kRemoved), (V{"How", "are", "you", "doing", "?"}));
  EXPECT_EQ(split(SplitBehavior::kIsolated), (V{"How", " ", "are", " ", "you", " ", "doing", "?"}));
  EXPECT_EQ(split(SplitBehavior::kMergedWithPrevious), (V{"How ", "are ", "you ", "doing", "?"}));
  EXPECT_EQ(split(SplitBehavior::kMergedWithNext), (V{"How", " are", " you", " doing", "?"}));
  EXPECT_EQ(split(SplitBehavior::kContiguous), (V{"How", " ", "are", " ", "you", " ", "doing?"}));
}

TEST(SplitBehavior, ConsecutiveDelimitersStaySeparate) {
  // "a,,b" with ',' as delimiter: only the first comma joins its neighbour.
  const std::vector<Segment> segments = {{0, 1, false}, {1, 2, true}, {2, 3, true}, {3, 4, false}};
  std::vector<std::pair<size_t, size_t>> pieces;
  apply_split_behavior(segments, SplitBehavior::kMergedWithPrevious, pieces);
  EXPECT_EQ(pieces, (std::vector<std::pair<size_t, size_t>>{{0, 2}, {2, 3}, {3, 4}}));
  apply_split_behavior(segments, SplitBehavior::kMergedWithNext, pieces);
  EXPECT_EQ(pieces, (std::vector<std::pair<size_t, size_t>>{{0, 1}, {1, 2}, {2, 4}}));
  apply_split_behavior(segments, SplitBehavior::kContiguous, pieces);
  EXPECT_EQ(pieces, (std::vector<std::pair<size_t, size_t>>{{0, 1}, {1, 3}, {3, 4}}));
}

TEST(PostProcessor, TemplateAddsSpecialTokensOnlyWhenAsked) {
  json config = toy_config(letters(), {});
  config["added_tokens"] = {{{"id", 35}, {"content", "<s>"}, {"special", true}},
                            {{"id", 36}, {"content", "</s>"}, {"special", true}}};
  config["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}, {"trim_offsets", false}},
        {{"type", "TemplateProcessing"},
         {"single",
          {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
           {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
           {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
         {"pair", json::array()},
         {"special_tokens",
          {{"<s>", {{"id", "<s>"}, {"ids", {35}}, {"tokens", {"<s>"}}}},
           {"</s>", {{"id", "</s>"}, {"ids", {36}}, {"tokens", {"</s>"}}}}}}}}}};
  Tokenizer tok = load(config);
  EXPECT_EQ(tok.encode("ab", true), std::vector<int32_t>({35, 0, 1, 36}));
  EXPECT_EQ(tok.encode("ab", false), std::vector<int32_t>({0, 1}));
  EXPECT_EQ(tok.encode("", true), std::vector<int32_t>({35, 36}));
  // The string shorthand of older files.
  config["post_processor"] = config["post_processor"]["processors"][1];
  config["post_processor"]["single"] = "<s> $A </s>";
  tok = load(config);
  EXPECT_EQ(tok.encode("ab", true), std::vector<int32_t>({35, 0, 1, 36}));
}

TEST(Encode, InvalidUtf8IsRepairedNotRejected) {
  json config = toy_config(letters(), {});
  config["model"]["vocab"]["\xEF\xBF\xBD"] = 400;
  const Tokenizer tok = load(config);
  EXPECT_EQ(tok.encode("a\xFF"
                       "b",
                       false),
            std::vector<int32_t>({0, 400, 1}));
  EXPECT_EQ(tok.encode("a\xE2\x82", false), std::vector<int32_t>({0, 400}));  // truncated
  EXPECT_EQ(tok.encode("\xED\xA0\x80", false), std::vector<int32_t>({400, 400, 400}));
}

TEST(AddedTokens, IdsAreAssignedAsTheReferenceDoes) {
  // Contents outside the model vocabulary get consecutive ids from its size up, whatever the
  // file declares within the vocabulary (HF only warns); contents inside keep the model's id.
  // (A declared id beyond the vocabulary is refused: config_error_test.cc.)
  json config = toy_config({"a", "b"}, {});
  config["added_tokens"] = {{{"id", 4}, {"content", "<x>"}},
                            {{"id", 0}, {"content", "b"}},
                            {{"id", 3}, {"content", "<y>"}}};
  const Tokenizer tok = load(config);
  EXPECT_EQ(tok.token_to_id("<x>"), 2);
  EXPECT_EQ(tok.token_to_id("b"), 1);
  EXPECT_EQ(tok.token_to_id("<y>"), 3);
  EXPECT_EQ(tok.vocab_size(), 4u);
}

// Awkward configurations on random text: whitespace-only added tokens with strip flags, a split
// pattern that matches the empty string, normalizers that grow the text. Nothing may crash
// (the sanitizer build runs this), results are deterministic and decodes are valid UTF-8.
TEST(Encode, RandomInputsOnAwkwardConfigurations) {
  const std::string m = "\xE2\x96\x81";
  std::vector<std::string> vocab = letters();
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab.emplace_back(name);
  }
  json config = toy_config(vocab, {"a b", "ab c"});
  config["model"]["vocab"]["ab"] = 400;
  config["model"]["vocab"]["abc"] = 401;
  config["model"]["byte_fallback"] = true;
  config["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "NFC"}},
        {{"type", "Replace"}, {"pattern", {{"Regex", "b+"}}}, {"content", "bb"}},
        {{"type", "Prepend"}, {"prepend", m}}}}};
  config["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "x*"}}}, {"behavior", "MergedWithNext"}},
        {{"type", "Digits"}, {"individual_digits", true}},
        {{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "first"}}}}};
  config["decoder"] = {{"type", "Sequence"},
                       {"decoders",
                        {{{"type", "ByteFallback"}},
                         {{"type", "Metaspace"}, {"replacement", m}},
                         {{"type", "Fuse"}},
                         {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 1}}}}};
  config["added_tokens"] = {
      {{"id", 0}, {"content", " "}, {"lstrip", true}, {"rstrip", true}, {"normalized", false}},
      {{"id", 0},
       {"content", "<t>"},
       {"rstrip", true},
       {"single_word", true},
       {"normalized", false}},
      {{"id", 0}, {"content", " <u> "}, {"lstrip", true}, {"normalized", false}, {"special", true}},
      {{"id", 0}, {"content", "bb"}, {"normalized", true}},
  };
  const Tokenizer tok = load(config);
  const std::vector<std::string> alphabet = {
      "a",    "b",   "c",           "x",   "1",        " ",         "  ",
      "\t",   "<t>", " <u> ",       "<u>", "\xC3\xA9", "e\xCC\x81", "\xE4\xB8\xAD",
      "\xFF", m,     "\xE3\x80\x80"};
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text;
    for (int k = rng() % 16; k > 0; --k) text += alphabet[rng() % alphabet.size()];
    const std::vector<int32_t> ids = tok.encode(text, true);
    ASSERT_EQ(ids, tok.encode(text, true));
    for (const bool skip : {false, true}) {
      const std::string decoded = tok.decode(ids, skip);
      ASSERT_TRUE(is_valid_utf8(decoded)) << ::testing::PrintToString(text);
      StreamDecoder stream(tok, skip);
      std::string streamed;
      for (const int32_t id : ids) streamed += stream.push(id);
      ASSERT_EQ(streamed + stream.finish(), decoded) << ::testing::PrintToString(text);
    }
  }
}

TEST(Encode, VocabularyQueries) {
  json config = toy_config({"a", "b"}, {});
  config["added_tokens"] = {{{"id", 2}, {"content", "<x>"}, {"special", true}},
                            {{"id", 1}, {"content", "b"}, {"special", false}}};
  const Tokenizer tok = load(config);
  EXPECT_EQ(tok.vocab_size(), 3u);  // "b" is counted once
  EXPECT_EQ(tok.id_to_token(2), "<x>");
  EXPECT_EQ(tok.id_to_token(3), "");
  EXPECT_EQ(tok.token_to_id("zzz"), std::nullopt);
  EXPECT_EQ(tok.decode(std::vector<int32_t>{0, 2, 7, -3, 1}, false), "a <x> b");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{0, 2, 7, -3, 1}, true), "a b");
}

}  // namespace
}  // namespace hearth::tok::testing
