// The one way hearth's programs load a model's tokenizer, so that none of them parses
// tokenizer.json when an image of it is at hand:
//   - served: the image the weight server built and shared (Tokenizer::from_image over the
//     mapping, which the tokenizer keeps alive), checked to be the image of this tokenizer.json;
//   - single-process: the image cache (tokenizer_cache.h);
//   - otherwise, or when the shared image is refused: parsing tokenizer.json. A refused image
//     costs one line on stderr per process, not an error.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tokenizer.h"
#include "tokenizer_cache.h"

namespace hearth {

struct TokenizerInputs {
  std::string_view json;                    // tokenizer.json's text; empty: the model has none
  std::span<const std::byte> image;         // the server's image of it; empty: none
  std::shared_ptr<const void> image_owner;  // keeps `image` mapped while the tokenizer lives
  std::string image_refusal;  // why a received image was already dropped ("" if it was not)
  // Single-process mode: go through the image cache with these options; unset: no cache.
  std::optional<TokenizerCacheOptions> cache;
  // Receives the line saying that the image was refused; null: stderr, once per process.
  std::function<void(const std::string&)> warn;
};

enum class TokenizerOrigin {
  kSharedImage,  // the server's image, mapped
  kCachedImage,  // the image cache: an earlier image or one built now
  kParsed,       // tokenizer.json parsed (no image, a refused one, or no usable cache)
};

struct LoadedTokenizer {
  Tokenizer tokenizer;
  TokenizerOrigin origin;
};

// nullopt when `inputs.json` is empty (the model has no tokenizer). Throws what
// Tokenizer::from_json throws for a tokenizer.json that cannot be loaded.
std::optional<LoadedTokenizer> load_tokenizer(const TokenizerInputs& inputs);

// A tokenizer.json file or a directory holding one, through the image cache (a FIFO or other
// non-regular file is refused, not waited on). Throws std::runtime_error naming the file.
LoadedTokenizer load_tokenizer_file(const std::filesystem::path& path,
                                    const TokenizerCacheOptions& cache = {});

const char* origin_name(TokenizerOrigin origin);  // "shared-image", "cached-image", "parsed"

}  // namespace hearth
