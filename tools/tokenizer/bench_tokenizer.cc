// bench-tokenizer: encode throughput (MB/s and tokens/s, one thread) of a tokenizer.json on
// English prose and on source code. Prints one JSON object. A benchmark, not a test: nothing
// is asserted.
//
//   bench-tokenizer --tokenizer DIR_OR_JSON [--load json|image] [--prose FILE]... [--code FILE]...
//                   [--mb N]
//
// --load image encodes with the tokenizer opened from its image (built, written to a temporary
// file and mapped, as a worker would map it) instead of the one parsed from tokenizer.json.
// Default inputs: the licence texts in /usr/share/common-licenses (real English prose) and the
// C++ sources of this repository (real code), each cut into ~4 KiB chunks (one encode call
// each) and cycled until N MB (default 8) have been encoded. "cold" is the first pass over the
// distinct text with a freshly loaded tokenizer (empty word cache); "warm" the best of three
// further passes.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer.h"
#include "base/read_file.h"

namespace {

namespace fs = std::filesystem;

// Cuts text into chunks of about `size` bytes at line ends, like prompts or documents.
std::vector<std::string> chunks_of(const std::string& text, size_t size) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = std::min(text.size(), start + size);
    const size_t nl = text.find('\n', end);
    end = nl == std::string::npos ? text.size() : nl + 1;
    out.push_back(text.substr(start, end - start));
    start = end;
  }
  return out;
}

std::vector<fs::path> default_prose() {
  std::vector<fs::path> files;
  const fs::path dir = "/usr/share/common-licenses";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file() && !e.is_symlink()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<fs::path> default_code() {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(HEARTH_SOURCE_DIR, ec)) {
    const std::string path = e.path().string();
    if (path.find("/build") != std::string::npos || path.find("/.") != std::string::npos) {
      continue;
    }
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".cc" || ext == ".h" || ext == ".cu" || ext == ".py")) {
      files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// A freshly loaded tokenizer (empty word cache), parsed or through a mapped image file.
hearth::Tokenizer load(const std::string& tokenizer_path, const std::string& how) {
  if (how == "json") return hearth::Tokenizer::from_file(tokenizer_path);
  const std::vector<std::byte> image = hearth::Tokenizer::build_image(
      hearth::read_file(hearth::tokenizer_json_path(tokenizer_path)));
  const fs::path file =
      fs::temp_directory_path() / ("bench-tokenizer-" + std::to_string(::getpid()) + ".tokimg");
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char*>(image.data()),
             static_cast<std::streamsize>(image.size()));
  hearth::Tokenizer tokenizer = hearth::Tokenizer::from_image_file(file);
  fs::remove(file);  // the mapping keeps the pages
  return tokenizer;
}

nlohmann::json measure(const std::string& tokenizer_path, const std::string& how,
                       const std::vector<fs::path>& files, double megabytes) {
  std::string text;
  for (const fs::path& f : files) text += hearth::read_file(f);
  nlohmann::json result = {{"files", files.size()}, {"distinct_bytes", text.size()}};
  if (text.empty()) {
    result["error"] = "no input text";
    return result;
  }
  const std::vector<std::string> chunks = chunks_of(text, 4096);
  const hearth::Tokenizer tokenizer = load(tokenizer_path, how);
  using Clock = std::chrono::steady_clock;

  size_t tokens = 0;
  auto t0 = Clock::now();
  for (const std::string& c : chunks) tokens += tokenizer.encode(c, false).size();
  const double cold_s = std::chrono::duration<double>(Clock::now() - t0).count();

  const auto target = static_cast<size_t>(megabytes * 1e6);
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    size_t bytes = 0;
    t0 = Clock::now();
    while (bytes < target) {
      for (const std::string& c : chunks) {
        tokenizer.encode(c, false);
        bytes += c.size();
      }
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(bytes) / s / 1e6);
  }
  const double bytes_per_token = static_cast<double>(text.size()) / static_cast<double>(tokens);
  result["tokens"] = tokens;
  result["bytes_per_token"] = bytes_per_token;
  result["cold_mb_s"] = static_cast<double>(text.size()) / cold_s / 1e6;
  result["warm_mb_s"] = best;
  result["cold_mtokens_s"] = static_cast<double>(tokens) / cold_s / 1e6;
  result["warm_mtokens_s"] = best / bytes_per_token;
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Encode throughput of a tokenizer.json on prose and code", "bench-tokenizer"};
  std::string tokenizer_path;
  std::vector<std::string> prose;
  std::vector<std::string> code;
  std::string how = "json";
  double megabytes = 8;
  app.add_option("--tokenizer", tokenizer_path, "tokenizer.json or model directory")->required();
  app.add_option("--load", how, "json: parse tokenizer.json; image: open its mapped image")
      ->check(CLI::IsMember({"json", "image"}));
  app.add_option("--prose", prose, "prose text files (default: /usr/share/common-licenses/*)");
  app.add_option("--code", code, "source files (default: this repository's sources)");
  app.add_option("--mb", megabytes, "megabytes to encode per measured pass");
  CLI11_PARSE(app, argc, argv);

  try {
    auto paths = [](const std::vector<std::string>& v, std::vector<fs::path> fallback) {
      return v.empty() ? fallback : std::vector<fs::path>(v.begin(), v.end());
    };
    nlohmann::json out = {
        {"tokenizer", tokenizer_path},
        {"load", how},
        {"threads", 1},
        {"prose", measure(tokenizer_path, how, paths(prose, default_prose()), megabytes)},
        {"code", measure(tokenizer_path, how, paths(code, default_code()), megabytes)},
    };
    std::cout << out.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "bench-tokenizer: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
