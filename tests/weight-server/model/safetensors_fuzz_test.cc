// Thousands of mutated safetensors images through the reader: each must parse into something
// consistent or be refused with std::runtime_error. Run under -DHEARTH_SANITIZE=ON, this is
// also the check that no input reads out of bounds.
#include <gtest/gtest.h>

#include <random>

#include "tests/support/fuzz_rng.h"
#include "tests/support/safetensors_builder.h"
#include "weight-server/model/safetensors.h"

namespace hearth {
namespace {

using fuzz::Rng;

// Parses, and when that succeeds checks the result is self-consistent.
void parse_checked(const std::vector<std::byte>& image, uint64_t case_id) {
  try {
    SafetensorsHeader h = parse_safetensors(image, "fuzz");
    for (const SafetensorsEntry& e : h.tensors) {
      ASSERT_LE(e.file_offset + e.info.bytes, image.size()) << "case " << case_id;
      ASSERT_EQ(e.info.numel() * dtype_size(e.info.dtype), e.info.bytes) << "case " << case_id;
    }
  } catch (const std::runtime_error& e) {
    ASSERT_NE(std::string(e.what()).find("fuzz"), std::string::npos) << "case " << case_id;
  }
}

std::vector<std::byte> base_image() {
  return test::valid_safetensors({{"model.embed_tokens.weight", "BF16", {16, 8}},
                                  {"model.norm.weight", "F32", {8}},
                                  {"lm_head.weight", "F16", {16, 8}}});
}

TEST(SafetensorsFuzz, RandomByteFlips) {
  const auto base = base_image();
  for (uint64_t c = 0; c < 3000; ++c) {
    Rng rng{c};
    auto image = base;
    const size_t flips = 1 + rng.below(8);
    for (size_t i = 0; i < flips; ++i) {
      // Mostly inside the header, where the interesting structure is.
      const size_t at =
          rng.below(4) ? rng.below(std::min<size_t>(image.size(), 200)) : rng.below(image.size());
      image[at] = std::byte(rng.next() & 0xff);
    }
    parse_checked(image, c);
  }
}

TEST(SafetensorsFuzz, Truncations) {
  const auto base = base_image();
  for (size_t len = 0; len <= base.size(); ++len)
    parse_checked(std::vector<std::byte>(base.begin(), base.begin() + len), len);
}

TEST(SafetensorsFuzz, RandomHeaderLengths) {
  auto image = base_image();
  for (uint64_t c = 0; c < 2000; ++c) {
    Rng rng{c + 100000};
    uint64_t len = rng.next() >> rng.below(64);
    for (int i = 0; i < 8; ++i) image[i] = std::byte((len >> (8 * i)) & 0xff);
    parse_checked(image, c);
  }
}

TEST(SafetensorsFuzz, RandomStructuredHeaders) {
  const char* dtypes[] = {"F32", "F16", "BF16", "I8", "F64", "", "bf16"};
  for (uint64_t c = 0; c < 3000; ++c) {
    Rng rng{c + 200000};
    nlohmann::json h = nlohmann::json::object();
    const size_t n = rng.below(5);
    uint64_t cursor = 0;
    for (size_t i = 0; i < n; ++i) {
      nlohmann::json shape = nlohmann::json::array();
      const size_t rank = rng.below(4);
      for (size_t r = 0; r < rank; ++r) shape.push_back(rng.below(6));
      const uint64_t begin = rng.below(3) ? cursor : rng.below(64);
      const uint64_t end = begin + (rng.below(3) ? rng.below(64) : rng.next() >> rng.below(64));
      cursor = end;
      nlohmann::json desc = {
          {"dtype", dtypes[rng.below(7)]}, {"shape", shape}, {"data_offsets", {begin, end}}};
      if (rng.below(10) == 0) desc.erase("shape");
      if (rng.below(10) == 0) desc["data_offsets"] = "x";
      h["t" + std::to_string(i)] = desc;
    }
    if (rng.below(5) == 0)
      h["__metadata__"] = {{"k", rng.below(2) ? nlohmann::json("v") : nlohmann::json(1)}};
    const size_t data = rng.below(3) ? std::min<uint64_t>(cursor, 1 << 16) : rng.below(128);
    parse_checked(test::safetensors_image(h.dump(), data), c);
  }
}

TEST(SafetensorsFuzz, RandomTextEdits) {
  const std::string header =
      R"({"a":{"dtype":"BF16","shape":[4,2],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})";
  const char alphabet[] = "{}[]\",:0123456789-eE.abBF \\u";
  for (uint64_t c = 0; c < 3000; ++c) {
    Rng rng{c + 300000};
    std::string text = header;
    const size_t edits = 1 + rng.below(4);
    for (size_t i = 0; i < edits; ++i) {
      const size_t at = rng.below(text.size());
      switch (rng.below(3)) {
        case 0:
          text[at] = alphabet[rng.below(sizeof alphabet - 1)];
          break;
        case 1:
          text.erase(at, 1 + rng.below(4));
          break;
        default:
          text.insert(at, 1, alphabet[rng.below(sizeof alphabet - 1)]);
          break;
      }
      if (text.empty()) text = "{";
    }
    parse_checked(test::safetensors_image(text, 24), c);
  }
}

}  // namespace
}  // namespace hearth
