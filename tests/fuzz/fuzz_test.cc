// The fuzz targets as seeded loops over the committed corpus (tests/fuzz/corpus/TARGET/): every
// seed must load, every mutation must load or be refused cleanly, and nesting far past the JSON
// depth limit must be refused without recursing. Deterministic, so a failure names a case that
// reproduces; run under -DHEARTH_SANITIZE=ON this is also the check that no input reads out of
// bounds or overflows.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/json_limits.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tests/fuzz/mutator.h"

namespace hearth::fuzz {
namespace {

namespace fs = std::filesystem;

struct Target {
  const char* name;  // also the corpus folder
  bool (*run)(std::string_view);
  size_t mutations;                  // sized so each target takes seconds under ASan on 2 cores
  bool safetensors_framing = false;  // the JSON is a header behind an 8-byte length
  bool typed_values = false;         // half the cases replace a value (mutate_json_value)
};

std::ostream& operator<<(std::ostream& os, const Target& t) {
  return os << t.name;
}

std::vector<std::string> corpus(const Target& t) {
  std::vector<fs::path> files;
  for (const auto& e :
       fs::directory_iterator(fs::path(HEARTH_SOURCE_DIR) / "tests/fuzz/corpus" / t.name))
    files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> seeds;
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    seeds.push_back(s.str());
  }
  return seeds;
}

// The JSON text of a seed (a safetensors image's header), and an input made from edited text.
std::string text_of(const Target& t, const std::string& seed) {
  if (!t.safetensors_framing || seed.size() < 8) return seed;
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | uint8_t(seed[size_t(i)]);
  return seed.substr(8, std::min<uint64_t>(len, seed.size() - 8));
}
std::string input_of(const Target& t, const std::string& seed, const std::string& text) {
  if (!t.safetensors_framing) return text;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(text.size()) >> (8 * i)) & 0xff);
  return out + text + seed.substr(std::min(seed.size(), 8 + text_of(t, seed).size()));
}

// Runs one input; a bug fails the test with the case that found it.
bool run_case(const Target& t, const std::string& input, const std::string& which) {
  try {
    return t.run(input);
  } catch (const FuzzBug& e) {
    ADD_FAILURE() << t.name << " " << which << ": " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << t.name << " " << which << ": escaped as " << typeid(e).name() << ": "
                  << e.what();
  }
  return false;
}

class Fuzz : public ::testing::TestWithParam<Target> {};

TEST_P(Fuzz, EverySeedLoads) {
  const std::vector<std::string> seeds = corpus(GetParam());
  ASSERT_GE(seeds.size(), 2u);
  for (size_t i = 0; i < seeds.size(); ++i)
    EXPECT_TRUE(run_case(GetParam(), seeds[i], "seed " + std::to_string(i)))
        << "seed " << i << " is refused";
}

TEST_P(Fuzz, MutationsLoadOrAreRefusedCleanly) {
  const Target& t = GetParam();
  const std::vector<std::string> seeds = corpus(t);
  ASSERT_FALSE(seeds.empty());
  size_t accepted = 0;
  for (uint64_t c = 0; c < t.mutations; ++c) {
    Rng rng{c};
    const std::string& seed = seeds[c % seeds.size()];
    std::string input;
    if (t.safetensors_framing && c % 2) {  // raw bytes: the length field and the data too
      input = seed;
      mutate(input, rng);
    } else if (t.typed_values && c % 2) {  // values of other types, then maybe bytes too
      input = seed;
      for (size_t e = 1 + rng.below(3); e > 0; --e) mutate_json_value(input, rng);
      if (rng.below(4) == 0) mutate(input, rng);
    } else {
      std::string text = text_of(t, seed);
      mutate(text, rng);
      input = input_of(t, seed, text);
    }
    accepted += run_case(t, input, "case " + std::to_string(c));
  }
  // Some mutations must get through, or they only ever test the first parse error.
  EXPECT_GT(accepted, 0u);
  RecordProperty("accepted", int(accepted));
}

TEST_P(Fuzz, DeepNestingIsRefusedWithoutRecursing) {
  const Target& t = GetParam();
  const std::vector<std::string> seeds = corpus(t);
  for (const size_t depth : {size_t(kMaxJsonDepth) + 1, size_t(1000), size_t(100000)}) {
    for (uint64_t c = 0; c < 8; ++c) {
      Rng rng{depth * 100 + c};
      const std::string& seed = seeds[c % seeds.size()];
      const std::string input = input_of(t, seed, nest(text_of(t, seed), depth, rng));
      EXPECT_FALSE(
          run_case(t, input, "depth " + std::to_string(depth) + " case " + std::to_string(c)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, Fuzz,
                         ::testing::Values(Target{"config", config_json, 16000},
                                           Target{"tokenizer", tokenizer_json, 2000},
                                           Target{"safetensors", safetensors, 20000, true},
                                           Target{"profile", profile_json, 20000},
                                           Target{"gateway_request", gateway_request, 20000, false,
                                                  true},
                                           Target{"serve", serve_request, 20000}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace hearth::fuzz
