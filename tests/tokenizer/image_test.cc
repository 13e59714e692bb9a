// Tokenizer images: opened from an image, a tokenizer behaves exactly as when parsed; and an
// image that is corrupted, truncated, of another version, or sealed over inconsistent tables
// is refused with a message naming what is wrong, never trusted and never a crash (these
// suites also run under ASan/UBSan).

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>

#include "base/digest.h"
#include "image_builder.h"
#include "image_format.h"
#include "image_writer.h"
#include "tokenizer_test_util.h"

namespace hearth::tok::testing {
namespace {

using Bytes = std::vector<std::byte>;

// A small tokenizer that fills every section and exercises every stage: byte fallback, an
// unknown token, added tokens (special and normalized), NFC, a regex split, a template and a
// decoder chain.
json rich_config() {
  json c = toy_config({"a", "b", "ab", " ", "\xC3\xA9", "aba", " a", "<0x78>", "<0xC3>", "<unk>"},
                      {"a b", "ab a"});
  c["model"]["merges"].push_back(json::array({" ", "a"}));  // the pair form: a token with a space
  c["model"]["byte_fallback"] = true;
  c["model"]["unk_token"] = "<unk>";
  c["added_tokens"] = {
      {{"id", 10}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
      {{"id", 11}, {"content", "hello"}, {"special", false}, {"normalized", true}},
  };
  c["normalizer"] = {{"type", "NFC"}};
  c["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", " ?\\p{L}+|\\s+"}}}, {"behavior", "Isolated"}};
  c["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", "<s> $A"},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {10}}, {"tokens", {"<s>"}}}}}}};
  c["decoder"] = {{"type", "Sequence"},
                  {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}};
  return c;
}

const std::vector<std::string>& samples() {
  static const std::vector<std::string> s = {
      "", "ab a", "aba b  a", "e\xCC\x81 x\xC3\xA9", "<s>hello ab<s>", "zzz \xFF\xFE ab", "xyz"};
  return s;
}

Bytes image_of(const json& config) {
  return Tokenizer::build_image(config.dump());
}

// The message of opening `image`, or "" when it opens. An accepted image must also encode and
// decode without fault, whatever its tables say.
std::string open_error(std::span<const std::byte> image) {
  try {
    const Tokenizer t = Tokenizer::from_image(image);
    for (const std::string& s : samples()) {
      const std::vector<int32_t> ids = t.encode(s, true);
      t.decode(ids, false);
    }
    std::vector<int32_t> all;
    for (int32_t id = -2; id < static_cast<int32_t>(t.vocab_size()) + 4; ++id) all.push_back(id);
    t.decode(all, true);
    StreamDecoder stream(t, false);
    for (const int32_t id : all) stream.push(id);
    stream.finish();
    return "";
  } catch (const std::runtime_error& e) {
    return e.what();
  }
}

#define EXPECT_REFUSED(image, fragment)                                \
  do {                                                                 \
    const std::string message_ = open_error(image);                    \
    EXPECT_NE(message_.find("tokenizer image: "), std::string::npos)   \
        << "accepted or odd: '" << message_ << "'";                    \
    EXPECT_NE(message_.find(fragment), std::string::npos) << message_; \
  } while (0)

ImageHeader header_of(std::span<const std::byte> image) {
  ImageHeader h;
  std::memcpy(&h, image.data(), sizeof(h));
  return h;
}

void put_header(Bytes& image, const ImageHeader& h) {
  std::memcpy(image.data(), &h, sizeof(h));
}

// A typed view of one section of a writable image.
template <typename T>
std::span<T> section(Bytes& image, Section s) {
  const SectionEntry e = header_of(image).sections[static_cast<size_t>(s)];
  return {reinterpret_cast<T*>(image.data() + e.offset), e.size / sizeof(T)};
}

// The same bytes at a fresh 8-byte aligned address, cut to `size`.
Bytes prefix(std::span<const std::byte> image, size_t size) {
  return Bytes(image.begin(), image.begin() + static_cast<std::ptrdiff_t>(size));
}

// Every place where a cut can fall between parts of the image.
std::vector<size_t> section_boundaries(std::span<const std::byte> image) {
  const ImageHeader h = header_of(image);
  std::vector<size_t> cuts = {
      0, 1, 7, 8, kChecksummedFrom, sizeof(ImageHeader) - 1, sizeof(ImageHeader)};
  for (const SectionEntry& s : h.sections) {
    for (const size_t at :
         {s.offset - 1, s.offset, s.offset + 1, s.offset + s.size - 1, s.offset + s.size}) {
      if (at < h.total_size) cuts.push_back(at);
    }
  }
  cuts.push_back(h.total_size - 1);
  return cuts;
}

TEST(TokenizerImage, OpensToTheSameTokenizer) {
  const json config = rich_config();
  const Tokenizer parsed = Tokenizer::from_json(config.dump());
  const Bytes image = image_of(config);
  const Tokenizer mapped = Tokenizer::from_image(image);
  EXPECT_EQ(mapped.vocab_size(), parsed.vocab_size());
  for (const std::string& s : samples()) {
    for (const bool special : {false, true}) {
      const std::vector<int32_t> ids = parsed.encode(s, special);
      EXPECT_EQ(mapped.encode(s, special), ids) << s;
      EXPECT_EQ(mapped.decode(ids, false), parsed.decode(ids, false)) << s;
      EXPECT_EQ(mapped.decode(ids, true), parsed.decode(ids, true)) << s;
    }
  }
  for (int32_t id = -1; id < 14; ++id) {
    EXPECT_EQ(mapped.id_to_token(id), parsed.id_to_token(id)) << id;
    EXPECT_EQ(mapped.is_special(id), parsed.is_special(id)) << id;
    EXPECT_EQ(mapped.token_to_id(parsed.id_to_token(id)),
              parsed.token_to_id(parsed.id_to_token(id)));
  }
  EXPECT_EQ(mapped.encode("ab a", true), (std::vector<int32_t>{10, 2, 6}));
}

TEST(TokenizerImage, IsDeterministicAndRecordsItsSource) {
  const std::string text = rich_config().dump();
  const Bytes a = Tokenizer::build_image(text);
  EXPECT_EQ(a, Tokenizer::build_image(text)) << "the same tokenizer.json must give the same bytes";
  const ImageHeader h = header_of(a);
  EXPECT_EQ(h.version, kImageVersion);
  EXPECT_EQ(h.total_size, a.size());
  EXPECT_EQ(h.source_hash, xxh3_128(text));
}

TEST(TokenizerImage, BuildRefusesWhatFromJsonRefuses) {
  json c = rich_config();
  c["pre_tokenizer"] = {{"type", "Whitespace"}};
  for (const auto& attempt : {std::function<void()>([&] { Tokenizer::from_json(c.dump()); }),
                              std::function<void()>([&] { Tokenizer::build_image(c.dump()); })}) {
    try {
      attempt();
      ADD_FAILURE() << "accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("pre_tokenizer: type 'Whitespace'"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(Tokenizer::build_image("{"), std::runtime_error);
}

TEST(TokenizerImage, HeaderProblemsAreNamed) {
  const Bytes good = image_of(rich_config());
  ASSERT_EQ(open_error(good), "");

  EXPECT_REFUSED(Bytes(), "truncated");
  Bytes bad = good;
  bad[0] = std::byte{'X'};
  EXPECT_REFUSED(bad, "bad magic");

  ImageHeader h = header_of(good);
  bad = good;
  h.version = kImageVersion + 1;
  put_header(bad, h);
  EXPECT_REFUSED(bad, "format version " + std::to_string(kImageVersion + 1));
  EXPECT_REFUSED(bad, "rebuild the image");

  h = header_of(good);
  h.header_size = 64;
  bad = good;
  put_header(bad, h);
  EXPECT_REFUSED(bad, "header size 64");

  bad = good;
  bad.resize(good.size() + 64);
  EXPECT_REFUSED(bad, "trailing bytes");

  bad = good;
  bad.back() ^= std::byte{1};
  EXPECT_REFUSED(bad, "checksum mismatch");

  // Not at an 8-byte boundary: refused rather than read misaligned.
  Bytes shifted(good.size() + 1);
  std::memcpy(shifted.data() + 1, good.data(), good.size());
  EXPECT_REFUSED(std::span<const std::byte>(shifted).subspan(1), "aligned");
}

TEST(TokenizerImage, EveryByteFlipIsRefused) {
  Bytes image = image_of(rich_config());
  std::mt19937 rng(7);
  for (size_t at = 0; at < image.size(); ++at) {
    const auto mask = static_cast<std::byte>(1 + rng() % 255);
    image[at] ^= mask;
    const std::string message = open_error(image);
    image[at] ^= mask;
    ASSERT_NE(message, "") << "byte " << at << " ^ " << static_cast<int>(mask) << " accepted";
  }
  EXPECT_EQ(open_error(image), "");
}

TEST(TokenizerImage, TruncationAtEverySectionBoundaryIsRefused) {
  const Bytes image = image_of(rich_config());
  for (const size_t cut : section_boundaries(image)) {
    EXPECT_REFUSED(prefix(image, cut), "truncated");
  }
}

TEST(TokenizerImage, SealedDirectoryProblemsAreNamed) {
  const Bytes good = image_of(rich_config());
  auto edited = [&](auto&& edit) {
    Bytes image = good;
    ImageHeader h = header_of(image);
    edit(h, image);
    put_header(image, h);
    seal_image(image);
    return image;
  };
  const auto vocab = static_cast<size_t>(Section::kVocab);
  EXPECT_REFUSED(edited([](ImageHeader& h, Bytes&) { h.section_count = 5; }), "sections");
  EXPECT_REFUSED(edited([&](ImageHeader& h, Bytes&) { h.sections[vocab].kind = 0; }),
                 "malformed directory entry");
  EXPECT_REFUSED(edited([&](ImageHeader& h, Bytes&) { h.sections[vocab].offset += 8; }),
                 "misaligned");
  EXPECT_REFUSED(edited([&](ImageHeader& h, Bytes&) { h.sections[vocab].offset = 64; }),
                 "inside the header");
  EXPECT_REFUSED(edited([&](ImageHeader& h, Bytes&) { h.sections[vocab].size = 1ull << 62; }),
                 "run past the end");
  EXPECT_REFUSED(edited([&](ImageHeader& h, Bytes&) { h.sections[vocab].offset = ~0ull << 6; }),
                 "run past the end");
  EXPECT_REFUSED(edited([&](ImageHeader& h, Bytes&) { h.sections[vocab].size -= 8; }),
                 "not a multiple of its 16-byte entries");
  EXPECT_REFUSED(edited([&](ImageHeader& h, Bytes&) { h.sections[vocab].size -= 16; }),
                 "not a power of two");

  // Cut inside a section, with the header's size made to match: the section runs past the end.
  for (const SectionEntry& s : header_of(good).sections) {
    if (s.size < 2) continue;
    for (const size_t cut : {s.offset + 1, s.offset + s.size - 1}) {
      Bytes image = prefix(good, cut);
      ImageHeader h = header_of(image);
      h.total_size = cut;
      put_header(image, h);
      seal_image(image);
      EXPECT_REFUSED(image, "run past the end");
    }
  }
}

TEST(TokenizerImage, SealedTableProblemsAreNamed) {
  const Bytes good = image_of(rich_config());
  const size_t strings_size = header_of(good).sections[static_cast<size_t>(Section::kStrings)].size;
  auto edited = [&](auto&& edit) {
    Bytes image = good;
    edit(image);
    seal_image(image);
    return image;
  };
  auto first_used = [](auto slots, auto&& used) {
    for (auto& s : slots) {
      if (used(s)) return &s;
    }
    throw std::logic_error("no used slot");
  };
  auto used_vocab = [](const VocabSlot& s) { return s.length != VocabSlot::kEmpty; };
  auto used_merge = [](const MergeSlot& s) { return s.key != MergeSlot::kEmpty; };

  EXPECT_REFUSED(edited([&](Bytes& i) {
                   first_used(section<VocabSlot>(i, Section::kVocab), used_vocab)->offset =
                       static_cast<uint32_t>(strings_size);
                 }),
                 "lie outside the strings section");
  EXPECT_REFUSED(edited([&](Bytes& i) {
                   first_used(section<VocabSlot>(i, Section::kVocab), used_vocab)->id = 1 << 20;
                 }),
                 "vocab slot");
  EXPECT_REFUSED(edited([&](Bytes& i) {
                   for (VocabSlot& s : section<VocabSlot>(i, Section::kVocab)) {
                     if (!used_vocab(s)) s = {0, 0, 0, 0};
                   }
                 }),
                 "vocab has no empty slot");
  EXPECT_REFUSED(edited([&](Bytes& i) {
                   for (MergeSlot& s : section<MergeSlot>(i, Section::kMerges)) {
                     if (!used_merge(s)) s = {12345, 0, 0};
                   }
                 }),
                 "merges has no empty slot");
  EXPECT_REFUSED(edited([&](Bytes& i) {
                   first_used(section<MergeSlot>(i, Section::kMerges), used_merge)->merged = -3;
                 }),
                 "merged id -3");
  EXPECT_REFUSED(
      edited([&](Bytes& i) { section<TokenRef>(i, Section::kIdTokens)[2].length = 999; }),
      "id_tokens[2]");
  EXPECT_REFUSED(edited([&](Bytes& i) {
                   // Point id 4 ("é", two bytes) at its second byte alone.
                   TokenRef& r = section<TokenRef>(i, Section::kIdTokens)[4];
                   r = {r.offset + 1, 1};
                 }),
                 "id_tokens[4]: the token does not start and end on whole characters");
  EXPECT_REFUSED(edited([&](Bytes& i) { section<char>(i, Section::kStrings)[0] = '\xFF'; }),
                 "the strings section is not valid UTF-8");
  EXPECT_REFUSED(edited([&](Bytes& i) { section<int32_t>(i, Section::kCharIds)[97] = 1 << 20; }),
                 "char_ids[97]");
  EXPECT_REFUSED(edited([&](Bytes& i) { section<char>(i, Section::kSettings)[0] = '['; }),
                 "settings are not valid JSON");

  // Settings that parse but are not a supported tokenizer: refused as tokenizer.json would be.
  TokenizerParts parts = build_tokenizer_parts(rich_config().dump());
  parts.settings["pre_tokenizer"] = {{"type", "Whitespace"}};
  const Bytes odd = write_image(parts.settings.dump(), parts.tables, {});
  EXPECT_REFUSED(odd, "settings: tokenizer.json: pre_tokenizer: type 'Whitespace'");
}

// Random damage behind a valid checksum (what a buggy or hostile writer could produce): each
// image is refused or, when its tables still pass every check, encodes and decodes without
// fault (open_error exercises it; ASan/UBSan watch).
TEST(TokenizerImage, SealedRandomDamageIsRefusedOrHarmless) {
  const Bytes good = image_of(rich_config());
  std::mt19937 rng(11);
  size_t refused = 0;
  constexpr int kTrials = 3000;
  for (int trial = 0; trial < kTrials; ++trial) {
    Bytes image = good;
    for (int k = 1 + static_cast<int>(rng() % 3); k > 0; --k) {
      const size_t at = kChecksummedFrom + rng() % (image.size() - kChecksummedFrom);
      image[at] = static_cast<std::byte>(rng());
    }
    seal_image(image);
    refused += !open_error(image).empty();
  }
  EXPECT_GT(refused, 0u);
}

TEST(TokenizerImage, OwnerKeepsTheBytesAlive) {
  auto bytes = std::make_shared<Bytes>(image_of(rich_config()));
  const Tokenizer t = Tokenizer::from_image(*bytes, bytes);
  const std::weak_ptr<Bytes> weak = bytes;
  bytes.reset();
  EXPECT_FALSE(weak.expired());
  EXPECT_EQ(t.encode("ab a", true), (std::vector<int32_t>{10, 2, 6}));
  const Tokenizer copy = t;
  EXPECT_EQ(copy.decode(std::vector<int32_t>{10, 2, 6}, true), "ab a");
}

TEST(TokenizerImage, FileErrorsNameTheFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("hearth_image_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const auto& [name, content, fragment] :
       {std::tuple<std::string, std::string, std::string>{"missing", "", "cannot open"},
        {"empty", "", "truncated"},
        {"text", "{\"model\": {}}", "bad magic"}}) {
    const std::filesystem::path file = dir / name;
    if (name != "missing") std::ofstream(file) << content;
    try {
      Tokenizer::from_image_file(file);
      ADD_FAILURE() << name << " accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(dir);
}

// The real tokenizers: truncation at every section boundary, and byte flips spread over the
// whole image, are refused.
class RealTokenizerImage : public ::testing::TestWithParam<std::string> {};

TEST_P(RealTokenizerImage, TruncatedOrFlippedIsRefused) {
  HEARTH_REQUIRE_TOKENIZER(GetParam());
  Bytes image =
      Tokenizer::build_image(read_file(tokenizer_cache() / GetParam() / "tokenizer.json"));
  ASSERT_EQ(open_error(image), "");
  for (const size_t cut : section_boundaries(image)) {
    EXPECT_REFUSED(prefix(image, cut), "truncated");
  }
  std::mt19937 rng(3);
  for (int trial = 0; trial < 64; ++trial) {
    const size_t at = rng() % image.size();
    image[at] ^= std::byte{0x10};
    EXPECT_NE(open_error(image), "") << "flip at " << at << " accepted";
    image[at] ^= std::byte{0x10};
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, RealTokenizerImage,
                         ::testing::Values("llama2", "llama3", "qwen3"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace hearth::tok::testing
