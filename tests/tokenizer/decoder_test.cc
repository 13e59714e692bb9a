// Decoders, batch and streaming: hand-checked cases for each component, and for many decoder
// chains a randomized check that the stream, chunk by chunk, is valid UTF-8 and adds up to the
// batch decode.

#include <gtest/gtest.h>

#include <random>

#include "byte_level.h"
#include "tokenizer_test_util.h"
#include "utf8.h"

namespace hearth::tok::testing {
namespace {

const std::string kMeta = "\xE2\x96\x81";  // ▁

// A vocabulary with plain words, metaspace words, spaces, all 256 byte tokens and a few odd
// spellings that look almost like byte tokens.
std::vector<std::string> decoder_vocab() {
  std::vector<std::string> v = {"a",     "b",    "hello", kMeta + "hello", kMeta,    kMeta + kMeta,
                                " ",     "  x ", "ab",    "\xC3\xA9",      "<0xZZ>", "<0x+A>",
                                "<0x4>", "x  "};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    v.emplace_back(name);
  }
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
  for (int b = 0; b < 256; ++b) v.emplace_back(alphabet.encode(static_cast<uint8_t>(b)));
  return v;
}

Tokenizer with_decoder(const json& decoder) {
  json config = toy_config(decoder_vocab(), {});
  // Ids follow the vocabulary (its size, then one more); tests look them up by spelling.
  config["added_tokens"] = {{{"id", 0}, {"content", "<s>"}, {"special", true}},
                            {{"id", 0}, {"content", "<tool>"}, {"special", false}}};
  config["decoder"] = decoder;
  return load(config);
}

int32_t id(const Tokenizer& tok, const std::string& token) {
  const auto v = tok.token_to_id(token);
  EXPECT_TRUE(v.has_value()) << token;
  return v.value_or(-1);
}

std::string streamed(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip,
                     std::vector<std::string>* chunks = nullptr) {
  StreamDecoder stream(tok, skip);
  std::string out;
  for (const int32_t i : ids) {
    std::string c = stream.push(i);
    EXPECT_TRUE(is_valid_utf8(c));
    out += c;
    if (chunks) chunks->push_back(std::move(c));
  }
  const std::string last = stream.finish();
  EXPECT_TRUE(is_valid_utf8(last));
  if (chunks) chunks->push_back(last);
  return out + last;
}

json seq(std::vector<json> decoders) {
  return {{"type", "Sequence"}, {"decoders", decoders}};
}
json replace_meta() {
  return {{"type", "Replace"}, {"pattern", {{"String", kMeta}}}, {"content", " "}};
}
json strip(int start, int stop) {
  return {{"type", "Strip"}, {"content", " "}, {"start", start}, {"stop", stop}};
}

TEST(Decoders, Llama2ChainRestoresSpacesAndBytes) {
  const Tokenizer tok = with_decoder(
      seq({replace_meta(), {{"type", "ByteFallback"}}, {{"type", "Fuse"}}, strip(1, 0)}));
  const std::vector<int32_t> ids = {id(tok, kMeta + "hello"), id(tok, "<0xE4>"), id(tok, "<0xB8>"),
                                    id(tok, "<0xAD>"),        id(tok, kMeta),    id(tok, "a")};
  EXPECT_EQ(tok.decode(ids, false), "hello\xE4\xB8\xAD a");
  std::vector<std::string> chunks;
  EXPECT_EQ(streamed(tok, ids, false, &chunks), "hello\xE4\xB8\xAD a");
  // Byte tokens are held until the run ends; the leading space is stripped at once.
  EXPECT_EQ(chunks, (std::vector<std::string>{"hello", "", "", "", "\xE4\xB8\xAD ", "a", ""}));
}

TEST(Decoders, ByteFallbackInvalidRunBecomesOneReplacementPerByte) {
  const Tokenizer tok = with_decoder({{"type", "ByteFallback"}});
  const std::string r = "\xEF\xBF\xBD";
  // A complete character followed by a dangling lead byte: the whole run is invalid.
  const std::vector<int32_t> ids = {id(tok, "<0xC3>"), id(tok, "<0xA9>"), id(tok, "<0xC3>"),
                                    id(tok, "a")};
  EXPECT_EQ(tok.decode(ids, false), r + r + r + "a");
  EXPECT_EQ(streamed(tok, ids, false), r + r + r + "a");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{id(tok, "<0xC3>"), id(tok, "<0xA9>")}, false),
            "\xC3\xA9");
  // Only "<0xHH>" exactly is a byte token ('+' as Rust's integer parser allows).
  EXPECT_EQ(tok.decode(std::vector<int32_t>{id(tok, "<0xZZ>"), id(tok, "<0x4>")}, false),
            "<0xZZ><0x4>");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{id(tok, "<0x+A>")}, false), "\n");
}

TEST(Decoders, ByteLevelHoldsIncompleteCharacters) {
  const Tokenizer tok = with_decoder({{"type", "ByteLevel"}});
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
  auto byte = [&](uint8_t b) { return id(tok, std::string(alphabet.encode(b))); };
  const std::vector<int32_t> ids = {byte('a'), byte(0xE4), byte(0xB8), byte(0xAD), byte(0xE4)};
  std::vector<std::string> chunks;
  EXPECT_EQ(streamed(tok, ids, false, &chunks), "a\xE4\xB8\xAD\xEF\xBF\xBD");
  EXPECT_EQ(chunks, (std::vector<std::string>{"a", "", "", "\xE4\xB8\xAD", "", "\xEF\xBF\xBD"}));
  EXPECT_EQ(tok.decode(ids, false), "a\xE4\xB8\xAD\xEF\xBF\xBD");
  // An added token outside the byte alphabet is emitted as its own UTF-8.
  json config = toy_config({"a"}, {});
  config["added_tokens"] = {{{"id", 1}, {"content", "<|\xE7\x94\xA8|>"}, {"special", false}}};
  config["decoder"] = {{"type", "ByteLevel"}};
  EXPECT_EQ(load(config).decode(std::vector<int32_t>{1, 0}, false), "<|\xE7\x94\xA8|>a");
}

TEST(Decoders, StripHoldsPossiblyTrailingCharacters) {
  const Tokenizer tok = with_decoder(seq({{{"type", "Fuse"}}, strip(1, 2)}));
  const std::vector<int32_t> ids = {id(tok, "  x "), id(tok, " "), id(tok, "a"), id(tok, "x  ")};
  std::vector<std::string> chunks;
  EXPECT_EQ(tok.decode(ids, false), " x  ax");
  EXPECT_EQ(streamed(tok, ids, false, &chunks), " x  ax");
  EXPECT_EQ(chunks, (std::vector<std::string>{" x", "", "  a", "x", ""}));
  // Per token (no Fuse) each token is stripped on its own; a token of only spaces shorter
  // than start + stop becomes empty (the reference panics there).
  const Tokenizer per_token = with_decoder(strip(2, 1));
  EXPECT_EQ(per_token.decode(std::vector<int32_t>{id(tok, " "), id(tok, "  x ")}, false), "x");
  EXPECT_EQ(streamed(per_token, {id(tok, " "), id(tok, "  x ")}, false), "x");
}

TEST(Decoders, MetaspaceDropsTheMarkOnlyInTheFirstToken) {
  json metaspace = {{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", "always"}};
  Tokenizer tok = with_decoder(metaspace);
  const std::vector<int32_t> ids = {id(tok, kMeta + kMeta), id(tok, kMeta + "hello")};
  EXPECT_EQ(tok.decode(ids, false), " hello");  // every mark of the first token goes
  EXPECT_EQ(streamed(tok, ids, false), " hello");
  metaspace["prepend_scheme"] = "never";
  tok = with_decoder(metaspace);
  EXPECT_EQ(tok.decode(ids, false), "   hello");
}

TEST(Decoders, NoDecoderJoinsWithSpacesAndSkipsSpecials) {
  const Tokenizer tok = with_decoder(nullptr);
  const std::vector<int32_t> ids = {id(tok, "<s>"), id(tok, "a"), id(tok, "<tool>"), id(tok, "b")};
  EXPECT_EQ(tok.decode(ids, false), "<s> a <tool> b");
  EXPECT_EQ(tok.decode(ids, true), "a <tool> b");
  EXPECT_EQ(streamed(tok, ids, true), "a <tool> b");
}

TEST(StreamDecoder, FinishResetsForTheNextStream) {
  const Tokenizer tok = with_decoder(seq({replace_meta(), {{"type", "Fuse"}}, strip(1, 0)}));
  StreamDecoder stream(tok, false);
  EXPECT_EQ(stream.push(id(tok, kMeta + "hello")), "hello");
  EXPECT_EQ(stream.finish(), "");
  EXPECT_EQ(stream.push(id(tok, kMeta + "hello")), "hello");  // first token again: stripped
  EXPECT_EQ(stream.finish(), "");
  StreamDecoder moved = std::move(stream);
  EXPECT_EQ(moved.push(id(tok, "a")), "a");
}

// Random id sequences through many chains: the stream must equal the batch decode.
TEST(StreamDecoder, EqualsBatchDecodeOnRandomSequences) {
  const std::vector<json> chains = {
      nullptr,
      {{"type", "ByteLevel"}},
      {{"type", "ByteFallback"}},
      {{"type", "Fuse"}},
      strip(1, 0),
      strip(2, 3),
      replace_meta(),
      {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", "_"}},
      {{"type", "Replace"}, {"pattern", {{"String", "ab"}}}, {"content", "[AB]"}},
      {{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", "first"}},
      seq({replace_meta(), {{"type", "ByteFallback"}}, {{"type", "Fuse"}}, strip(1, 0)}),
      seq({{{"type", "ByteFallback"}}, {{"type", "Metaspace"}, {"replacement", kMeta}}}),
      seq({{{"type", "ByteFallback"}},
           {{"type", "Fuse"}},
           {{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", "never"}},
           strip(2, 1)}),
      seq({{{"type", "ByteLevel"}},
           {{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}},
           strip(1, 1)}),
      seq({replace_meta(), {{"type", "ByteFallback"}}, strip(1, 0), {{"type", "Fuse"}}}),
      seq({}),
  };
  std::mt19937 rng(1234);
  for (size_t c = 0; c < chains.size(); ++c) {
    const Tokenizer tok = with_decoder(chains[c]);
    const int32_t vocab = static_cast<int32_t>(decoder_vocab().size());
    const int32_t specials[2] = {id(tok, "<s>"), id(tok, "<tool>")};
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<int32_t> ids(rng() % 24);
      for (int32_t& i : ids) {
        const uint32_t k = rng() % 10;
        i = k < 6   ? static_cast<int32_t>(rng() % vocab)
            : k < 8 ? specials[rng() % 2]
                    : static_cast<int32_t>(rng() % 14);
      }
      for (const bool skip : {false, true}) {
        ASSERT_EQ(streamed(tok, ids, skip), tok.decode(ids, skip))
            << "chain " << c << " " << chains[c].dump() << " ids " << json(ids).dump();
      }
    }
  }
}

}  // namespace
}  // namespace hearth::tok::testing
