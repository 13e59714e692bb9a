// The tokenizer image cache of single-process mode: a process that loads a model's tokenizer
// opens the image built by an earlier process (a few ms) instead of parsing tokenizer.json
// (~0.4 s for Llama 3). Images are keyed by the XXH3-128 of the tokenizer.json bytes, so an
// edited tokenizer.json simply misses and gets a new image; stale images are never used.
//
//   const hearth::Tokenizer tok = hearth::load_tokenizer_cached(model.tokenizer_json).tokenizer;
//
// The cache never makes loading fail: an unusable directory, an unreadable or corrupted image,
// a failed write each cost one line on stderr (or to `warn`) and the tokenizer is parsed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "tokenizer.h"

namespace hearth {

struct TokenizerCacheOptions {
  bool enabled = true;
  // Where the images live; empty: default_tokenizer_cache_dir().
  std::filesystem::path dir;
  // Receives each problem with the cache as one line; null: written to stderr.
  std::function<void(const std::string&)> warn;
  // The images' byte budget: adding one removes the least recently used beyond it
  // (cache_budget.h). Unset: $HEARTH_TOKENIZER_IMAGE_CACHE_MAX_MB, else 128 MiB.
  std::optional<uint64_t> max_bytes;
};

// $HEARTH_TOKENIZER_IMAGE_CACHE (a directory, or "off" to disable the cache), else
// $XDG_CACHE_HOME/hearth/tokenizers, else $HOME/.cache/hearth/tokenizers; nullopt when
// disabled or when none of these variables is set.
std::optional<std::filesystem::path> default_tokenizer_cache_dir();

enum class TokenizerSource {
  kCacheHit,  // opened from the cached image
  kBuilt,     // parsed; its image is now in the cache
  kParsed,    // parsed; the cache was disabled or unusable (see the warning)
};

struct CachedTokenizer {
  Tokenizer tokenizer;
  TokenizerSource source;
  std::filesystem::path image;  // the cached image file; empty for kParsed
};

// The tokenizer of a tokenizer.json document, through the cache. Throws only what
// Tokenizer::from_json throws for the document itself. Images are written atomically (a
// temporary file renamed into place, mode 0644; directories created 0700), so concurrent
// processes may share a cache; adding an image trims the cache to its budget.
CachedTokenizer load_tokenizer_cached(std::string_view tokenizer_json,
                                      const TokenizerCacheOptions& options = {});

// The same for a tokenizer.json file or a model directory containing one.
CachedTokenizer load_tokenizer_file_cached(const std::filesystem::path& path,
                                           const TokenizerCacheOptions& options = {});

}  // namespace hearth
