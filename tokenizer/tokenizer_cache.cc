#include "tokenizer_cache.h"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <vector>

#include "atomic_file.h"
#include "cache_budget.h"
#include "base/digest.h"
#include "base/mapped_file.h"
#include "image_reader.h"

namespace hearth {
namespace {

std::filesystem::path from_env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::filesystem::path() : std::filesystem::path(value);
}

void report(const TokenizerCacheOptions& options, const std::string& message) {
  if (options.warn) {
    options.warn(message);
  } else {
    std::cerr << "hearth: tokenizer cache: " << message << "\n";
  }
}

// The cached image at `path` if it exists and is the image of `key`; nullopt (with a warning
// unless it is simply missing) otherwise.
std::optional<Tokenizer> open_cached(const std::filesystem::path& path, const Digest128& key,
                                     const TokenizerCacheOptions& options) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  try {
    auto mapping =
        std::make_shared<const MappedFile>(MappedFile::open(path, MappedFile::Prefault::kYes));
    if (tok::peek_source_hash(mapping->bytes()) != key) {
      throw std::runtime_error("built from a different tokenizer.json");
    }
    return Tokenizer::from_image(mapping->bytes(), mapping);
  } catch (const std::exception& e) {
    // Removed by another process's trim since we looked: a plain miss.
    if (!std::filesystem::exists(path, ec)) return std::nullopt;
    report(options, "ignoring " + path.string() + ": " + e.what() + "; rebuilding it");
    return std::nullopt;
  }
}

// The budget of `options`, of $HEARTH_TOKENIZER_IMAGE_CACHE_MAX_MB, or the default.
uint64_t cache_budget(const TokenizerCacheOptions& options) {
  if (options.max_bytes) return *options.max_bytes;
  const char* env = std::getenv("HEARTH_TOKENIZER_IMAGE_CACHE_MAX_MB");
  if (env == nullptr || *env == '\0') return tok::kDefaultImageCacheBudget;
  uint64_t mb = 0;
  const char* end = env + std::strlen(env);
  const auto [at, error] = std::from_chars(env, end, mb);
  if (error != std::errc() || at != end || mb > (uint64_t(1) << 40)) {
    report(options, "HEARTH_TOKENIZER_IMAGE_CACHE_MAX_MB='" + std::string(env) +
                        "' is not a number of MiB from 0 to 2^40; using " +
                        std::to_string(tok::kDefaultImageCacheBudget >> 20));
    return tok::kDefaultImageCacheBudget;
  }
  return mb << 20;
}

}  // namespace

std::optional<std::filesystem::path> default_tokenizer_cache_dir() {
  if (const std::filesystem::path dir = from_env("HEARTH_TOKENIZER_IMAGE_CACHE"); !dir.empty()) {
    if (dir == "off") return std::nullopt;
    return dir;
  }
  if (const std::filesystem::path xdg = from_env("XDG_CACHE_HOME"); xdg.is_absolute()) {
    return xdg / "hearth" / "tokenizers";  // the XDG spec ignores relative values
  }
  if (const std::filesystem::path home = from_env("HOME"); !home.empty()) {
    return home / ".cache" / "hearth" / "tokenizers";
  }
  return std::nullopt;
}

CachedTokenizer load_tokenizer_cached(std::string_view tokenizer_json,
                                      const TokenizerCacheOptions& options) {
  std::optional<std::filesystem::path> dir;
  if (options.enabled) {
    dir = options.dir.empty() ? default_tokenizer_cache_dir() : options.dir;
    if (!dir && from_env("HEARTH_TOKENIZER_IMAGE_CACHE") != "off") {
      report(options,
             "no cache directory (set HEARTH_TOKENIZER_IMAGE_CACHE, XDG_CACHE_HOME or "
             "HOME); parsing tokenizer.json");
    }
  }
  if (!dir) return {Tokenizer::from_json(tokenizer_json), TokenizerSource::kParsed, {}};

  const Digest128 key = xxh3_128(tokenizer_json);
  // The format version is in the name, so builds that read different versions can share a
  // directory without overwriting each other's images.
  const std::filesystem::path image_path =
      *dir / (to_hex(key) + ".v" + std::to_string(tok::kImageVersion) + ".tokimg");
  if (std::optional<Tokenizer> hit = open_cached(image_path, key, options)) {
    tok::mark_image_used(image_path);  // the least recently used go first
    return {std::move(*hit), TokenizerSource::kCacheHit, image_path};
  }

  // Built once, used from the same bytes that are written, so this process already runs on
  // exactly what the next one will map.
  auto image =
      std::make_shared<const std::vector<std::byte>>(Tokenizer::build_image(tokenizer_json));
  Tokenizer tokenizer = Tokenizer::from_image(*image, image);
  try {
    tok::create_directories(*dir, 0700);
    tok::write_file_atomically(image_path, *image, 0644);
    tok::trim_image_cache(*dir, cache_budget(options), image_path);
  } catch (const std::exception& e) {
    report(options, std::string(e.what()) + "; continuing without the cache");
    return {std::move(tokenizer), TokenizerSource::kParsed, {}};
  }
  return {std::move(tokenizer), TokenizerSource::kBuilt, image_path};
}

CachedTokenizer load_tokenizer_file_cached(const std::filesystem::path& path,
                                           const TokenizerCacheOptions& options) {
  const std::filesystem::path file = tokenizer_json_path(path);
  std::optional<MappedFile> json;
  try {
    json = MappedFile::open(file, MappedFile::Prefault::kYes);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("cannot open tokenizer file ") + e.what());
  }
  try {
    return load_tokenizer_cached(json->text(), options);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(file.string() + ": " + e.what());
  }
}

}  // namespace hearth
