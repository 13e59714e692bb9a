// The HTTP request parser's fuzz target as seeded loops over tests/fuzz/corpus/http_request/
// (each file: one byte choosing how the rest is split into reads, then the bytes a client
// sent): every seed parses, every split of every seed gives the same requests, and thousands
// of mutations are parsed or refused cleanly within the limits. Deterministic, so a failure
// names a case that reproduces.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/fuzz/fuzz_targets.h"
#include "tests/fuzz/http_request_target.h"
#include "tests/fuzz/mutator.h"

namespace hearth::fuzz {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> seeds() {
  std::vector<fs::path> files;
  for (const auto& e :
       fs::directory_iterator(fs::path(HEARTH_SOURCE_DIR) / "tests/fuzz/corpus/http_request"))
    files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> out;
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    out.push_back(s.str());
  }
  return out;
}

bool run_case(const std::string& input, const std::string& which) {
  try {
    return http_request(input);
  } catch (const FuzzBug& e) {
    ADD_FAILURE() << which << ": " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << which << ": escaped as " << typeid(e).name() << ": " << e.what();
  }
  return false;
}

// HTTP's own pieces, for mutations that reach past the first parse error.
void mutate_http(std::string& s, Rng& rng) {
  static const std::string_view words[] = {"\r\n",
                                           "\n",
                                           "\r\n\r\n",
                                           ":",
                                           " ",
                                           "\t",
                                           "\r",
                                           std::string_view("\0", 1),
                                           "chunked",
                                           "Transfer-Encoding: chunked\r\n",
                                           "Content-Length: 0\r\n",
                                           "Content-Length: 99999999999999999999\r\n",
                                           "Content-Length: -1\r\n",
                                           "Expect: 100-continue\r\n",
                                           "Connection: close\r\n",
                                           "Host: h\r\n",
                                           "0\r\n\r\n",
                                           "ffffffffffffffff\r\n",
                                           "10;x=y\r\n",
                                           "HTTP/1.0",
                                           "HTTP/1.1",
                                           "HTTP/2.0",
                                           "GET / HTTP/1.1\r\nHost: h\r\n\r\n",
                                           "?q=1",
                                           "\xff"};
  if (rng.below(2)) {
    mutate(s, rng);
    return;
  }
  const size_t edits = 1 + rng.below(3);
  for (size_t e = 0; e < edits; ++e)
    s.insert(1 + rng.below(s.size()), words[rng.below(std::size(words))]);
}

TEST(HttpRequestFuzz, EverySeedParsesWhateverTheSplit) {
  const std::vector<std::string> all = seeds();
  ASSERT_GE(all.size(), 2u);
  for (size_t i = 0; i < all.size(); ++i) {
    for (int pick = 0; pick < 256; ++pick) {
      std::string input = all[i];
      input[0] = char(pick);
      EXPECT_TRUE(run_case(input, "seed " + std::to_string(i) + " split " + std::to_string(pick)))
          << "seed " << i << " is refused";
    }
  }
}

TEST(HttpRequestFuzz, MutationsParseOrAreRefusedCleanly) {
  const std::vector<std::string> all = seeds();
  size_t accepted = 0;
  for (uint64_t c = 0; c < 50000; ++c) {
    Rng rng{c};
    std::string input = all[c % all.size()];
    mutate_http(input, rng);
    if (input.empty()) continue;
    accepted += run_case(input, "case " + std::to_string(c));
  }
  EXPECT_GT(accepted, 0u);
  RecordProperty("accepted", int(accepted));
}

TEST(HttpRequestFuzz, FloodsPastEveryLimitAreRefused) {
  // Past each limit by a lot: the parser refuses them as it reads, whatever the split.
  const std::string many_headers = [] {
    std::string s = "GET / HTTP/1.1\r\nHost: h\r\n";
    for (int i = 0; i < 1000; ++i) s += "X: y\r\n";
    return s;
  }();
  const std::string floods[] = {
      "GET /" + std::string(100000, 'a'),
      "GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(100000, 'b'),
      many_headers,
      "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + std::string(100000, '1'),
      "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1;" +
          std::string(100000, 'e'),
      "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" +
          std::string(100000, 'T'),
      std::string(100000, '\n'),
  };
  for (size_t i = 0; i < std::size(floods); ++i)
    for (char pick : {'\x00', '\x07', '\x80', '\xff'})
      EXPECT_FALSE(run_case(pick + floods[i], "flood " + std::to_string(i)));
}

}  // namespace
}  // namespace hearth::fuzz
