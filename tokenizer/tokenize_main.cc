// hearth-tokenize: encode JSON strings to token ids, or decode id arrays to strings, one JSON
// value per line on stdin and one per line on stdout. Exits non-zero at the first bad line.
// Loads the tokenizer through the image cache (tokenizer_cache.h) unless told otherwise, and
// builds tokenizer images (--build-image).

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "atomic_file.h"
#include "base/json_limits.h"
#include "tokenizer.h"
#include "tokenizer_cache.h"

namespace {

using nlohmann::json;

int fail(size_t line_no, const std::string& message) {
  std::cerr << "hearth-tokenize: line " << line_no << ": " << message << "\n";
  return 1;
}

int run(const hearth::Tokenizer& tokenizer, bool decode, bool add_special, bool skip_special) {
  std::string line;
  size_t line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    json value;
    try {
      value = hearth::parse_json(line, "");
    } catch (const hearth::JsonError& e) {
      return fail(line_no, e.what());
    }
    if (!decode) {
      if (!value.is_string()) return fail(line_no, "expected a JSON string");
      const std::vector<int32_t> ids = tokenizer.encode(value.get<std::string>(), add_special);
      std::cout << json(ids).dump() << '\n' << std::flush;
      continue;
    }
    if (!value.is_array()) return fail(line_no, "expected a JSON array of token ids");
    std::vector<int32_t> ids;
    ids.reserve(value.size());
    for (const json& id : value) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return fail(line_no, "token ids must be integers in [0, 2^31), got " + id.dump());
      }
      ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    // decode() always yields valid UTF-8, so dump() cannot throw on it.
    std::cout << json(tokenizer.decode(ids, skip_special)).dump() << '\n' << std::flush;
  }
  if (std::cin.bad()) {
    std::cerr << "hearth-tokenize: error reading stdin\n";
    return 1;
  }
  return 0;
}

struct Options {
  std::string tokenizer;
  std::string image;
  std::string build_image;
  std::string cache_dir;
  bool no_cache = false;
};

hearth::Tokenizer load(const Options& o) {
  if (!o.image.empty()) return hearth::Tokenizer::from_image_file(o.image);
  if (o.no_cache) return hearth::Tokenizer::from_file(o.tokenizer);
  hearth::TokenizerCacheOptions cache;
  cache.dir = o.cache_dir;
  cache.warn = [](const std::string& message) {
    std::cerr << "hearth-tokenize: tokenizer cache: " << message << "\n";
  };
  return hearth::load_tokenizer_file_cached(o.tokenizer, cache).tokenizer;
}

void build_image(const Options& o) {
  const std::filesystem::path file = hearth::tokenizer_json_path(o.tokenizer);
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open tokenizer file " + file.string());
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error("cannot read tokenizer file " + file.string());
  std::vector<std::byte> image;
  try {
    image = hearth::Tokenizer::build_image(json);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(file.string() + ": " + e.what());
  }
  hearth::tok::write_file_atomically(o.build_image, image, 0644);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Encode text with a Hugging Face tokenizer.json, or decode token ids.\n"
      "Encode: each stdin line is a JSON string; each stdout line is a JSON array of ids.\n"
      "Decode (--decode): each stdin line is a JSON array of ids; each stdout line a string.\n"
      "The tokenizer is loaded from a cached tokenizer image (a binary form opened in a few ms)\n"
      "when one exists for the tokenizer.json's content, else parsed and its image cached. The\n"
      "cache is $HEARTH_TOKENIZER_IMAGE_CACHE, else $XDG_CACHE_HOME/hearth/tokenizers, else\n"
      "~/.cache/hearth/tokenizers; HEARTH_TOKENIZER_IMAGE_CACHE=off disables it.",
      "hearth-tokenize"};
  Options o;
  bool decode = false;
  bool add_special = false;
  bool skip_special = false;
  CLI::Option* tokenizer = app.add_option("--tokenizer", o.tokenizer,
                                          "tokenizer.json, or a model directory containing one")
                               ->type_name("PATH");
  CLI::Option* image =
      app.add_option("--image", o.image, "open this tokenizer image instead of a tokenizer.json")
          ->type_name("FILE")
          ->excludes(tokenizer);
  app.add_option("--build-image", o.build_image,
                 "write the tokenizer image of --tokenizer to OUT and exit")
      ->type_name("OUT")
      ->needs(tokenizer);
  CLI::Option* no_cache = app.add_flag(
      "--no-cache", o.no_cache, "parse tokenizer.json; neither read nor write the image cache");
  app.add_option("--cache-dir", o.cache_dir, "the image cache directory to use")
      ->type_name("DIR")
      ->excludes(no_cache)
      ->excludes(image);
  app.add_flag("--add-special-tokens", add_special,
               "apply the post-processor template when encoding (e.g. BOS)");
  app.add_flag("--decode", decode, "decode id arrays instead of encoding strings");
  app.add_flag("--skip-special-tokens", skip_special, "drop special tokens when decoding");
  CLI11_PARSE(app, argc, argv);
  if (!*tokenizer && !*image) {
    std::cerr << "hearth-tokenize: --tokenizer or --image is required (see --help)\n";
    return 1;
  }

  try {
    if (!o.build_image.empty()) {
      build_image(o);
      return 0;
    }
    const hearth::Tokenizer t = load(o);
    return run(t, decode, add_special, skip_special);
  } catch (const std::exception& e) {
    std::cerr << "hearth-tokenize: " << e.what() << "\n";
    return 1;
  }
}
