// The frame codec fuzzed: thousands of mutations of the committed corpus, random chunkings,
// and deep nesting, each checked against frame_fuzz.h's invariants. Deterministic (fixed
// seeds, bounded iterations) so a failure names a case that reproduces; run under
// -DHEARTH_SANITIZE=ON it is also the check that nothing reads out of bounds or overflows.
#include "tests/ipc/frame_fuzz.h"

#include <gtest/gtest.h>

#include <functional>

#include "ipc/frame.h"
#include "base/json_limits.h"

namespace hearth::fuzz {
namespace {

const std::filesystem::path kCorpus =
    std::filesystem::path(HEARTH_SOURCE_DIR) / "tests/fuzz/corpus/ipc_frame";

std::string frame_of(const std::string& payload) {
  return le32(static_cast<std::uint32_t>(payload.size())) + payload;
}

TEST(FrameFuzz, TheCorpusIsValidAndPasses) {
  const std::vector<std::string> corpus = load_corpus(kCorpus);
  ASSERT_GE(corpus.size(), 15u) << kCorpus;
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    const Decoded d = decode(corpus[i], {}, 1 << 16);
    EXPECT_FALSE(d.error) << "seed " << i << ": " << d.error->message;
    EXPECT_FALSE(d.bodies.empty()) << "seed " << i;
    EXPECT_EQ(check_frame_bytes(corpus[i], i), "") << "seed " << i;
  }
}

TEST(FrameFuzz, MutatedCorpus) {
  const std::vector<std::string> corpus = load_corpus(kCorpus);
  ASSERT_FALSE(corpus.empty());
  int refused = 0, decoded = 0;
  for (std::uint64_t c = 0; c < 20000; ++c) {
    Rng rng{c};
    std::string data = corpus[rng.below(corpus.size())];
    const std::string& other = corpus[rng.below(corpus.size())];
    for (std::size_t m = 1 + rng.below(4); m > 0; --m) mutate(data, other, rng);
    ASSERT_EQ(check_frame_bytes(data, c), "") << "case " << c;
    const Decoded d = decode(data, {}, 1 << 16);
    refused += d.error.has_value();
    decoded += static_cast<int>(d.bodies.size());
  }
  // The mutations reach both sides: frames that decode and frames that are refused.
  EXPECT_GT(refused, 1000);
  EXPECT_GT(decoded, 1000);
}

TEST(FrameFuzz, RandomBytes) {
  for (std::uint64_t c = 0; c < 3000; ++c) {
    Rng rng{c + 1'000'000};
    std::string data(rng.below(96), '\0');
    for (char& ch : data) ch = static_cast<char>(rng.next());
    // Half the cases get a plausible header, so the payload is parsed, not just the length.
    if (rng.below(2) && data.size() >= 4)
      data.replace(0, 4, le32(static_cast<std::uint32_t>(data.size() - 4)));
    ASSERT_EQ(check_frame_bytes(data, c), "") << "case " << c;
  }
}

// Nesting is refused past the limit whatever the shape, at any depth up to far beyond what a
// recursive parser, copy or dump would survive, and accepted up to it.
TEST(FrameFuzz, DeepNesting) {
  auto nested = [](const std::string& open, const std::string& close, std::size_t levels) {
    std::string s;
    for (std::size_t i = 0; i < levels; ++i) s += open;
    s += "1";
    for (std::size_t i = 0; i < levels; ++i) s += close;
    return s;
  };
  const std::size_t limit = kMaxJsonDepth;
  for (const std::size_t depth : {limit - 1, limit, limit + 1, limit * 2, std::size_t{100'000}}) {
    // Inside a request ({"x": ...} is one level), as arrays and as objects.
    for (const auto& [open, close] : {std::pair<std::string, std::string>{"[", "]"},
                                      std::pair<std::string, std::string>{"{\"a\":", "}"}}) {
      const std::string payload =
          "{\"op\":\"list\",\"id\":1,\"x\":" + nested(open, close, depth - 1) + "}";
      const Decoded d = decode(frame_of(payload), {}, 1 << 20);
      if (depth <= limit) {
        EXPECT_FALSE(d.error) << depth << ": " << d.error->message;
        EXPECT_EQ(d.bodies.size(), 1u) << depth;
      } else {
        ASSERT_TRUE(d.error) << depth << " levels were accepted";
        EXPECT_EQ(d.error->code, ipc::ErrorCode::kBadRequest);
        EXPECT_NE(d.error->message.find("nested deeper than"), std::string::npos)
            << d.error->message;
      }
      EXPECT_EQ(check_frame_bytes(frame_of(payload), depth, 1 << 20), "") << depth;
    }
  }
  // Unclosed: 1 MB of '[' in a frame that says so.
  const Decoded d = decode(frame_of(std::string(1 << 20, '[')), {}, 2 << 20);
  ASSERT_TRUE(d.error);
  EXPECT_EQ(d.error->code, ipc::ErrorCode::kBadRequest);
}

// Valid JSON objects of random shape round-trip through encode and decode exactly.
TEST(FrameFuzz, RandomObjectsRoundTrip) {
  const std::string strings[] = {
      "",        "plain",       "caf\xc3\xa9",           "\xf0\x9f\x94\xa5",
      "quote\"", "back\\slash", std::string("nul\0", 4), "\n\t"};
  for (std::uint64_t c = 0; c < 2000; ++c) {
    Rng rng{c + 2'000'000};
    std::function<nlohmann::json(int)> value = [&](int depth) -> nlohmann::json {
      switch (depth > 6 ? rng.below(4) : rng.below(6)) {
        case 0:
          return nullptr;
        case 1:
          return rng.below(2) ? nlohmann::json(rng.next())
                              : nlohmann::json(-int64_t(rng.below(1000)));
        case 2:
          return static_cast<double>(rng.next() % 100000) / 7.0;
        case 3:
          return strings[rng.below(8)] + std::to_string(rng.below(10));
        case 4: {
          nlohmann::json a = nlohmann::json::array();
          for (std::size_t i = rng.below(4); i > 0; --i) a.push_back(value(depth + 1));
          return a;
        }
        default: {
          nlohmann::json o = nlohmann::json::object();
          for (std::size_t i = rng.below(4); i > 0; --i)
            o["k" + std::to_string(rng.below(6))] = value(depth + 1);
          return o;
        }
      }
    };
    nlohmann::json body = nlohmann::json::object();
    for (std::size_t i = rng.below(5); i > 0; --i) body["f" + std::to_string(i)] = value(1);
    const std::string bytes = ipc::encode_frame(body);
    const Decoded d = decode(bytes, {}, 1 << 20);
    ASSERT_FALSE(d.error) << "case " << c << ": " << d.error->message;
    ASSERT_EQ(d.bodies.size(), 1u);
    EXPECT_EQ(d.bodies[0], body) << "case " << c;
    ASSERT_EQ(check_frame_bytes(bytes, c, 1 << 20), "") << "case " << c;
  }
}

}  // namespace
}  // namespace hearth::fuzz
