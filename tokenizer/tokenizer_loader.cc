#include "tokenizer_loader.h"

#include <atomic>
#include <iostream>
#include <stdexcept>

#include "base/digest.h"
#include "image_reader.h"

namespace hearth {
namespace {

void warn_once(const TokenizerInputs& inputs, const std::string& line) {
  if (inputs.warn) {
    inputs.warn(line);
    return;
  }
  // Every worker of a broken server would otherwise repeat it per model and per request.
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) std::cerr << "hearth: " << line << "\n";
}

// The shared image as a tokenizer, or the reason it cannot be one.
std::optional<Tokenizer> open_shared_image(const TokenizerInputs& inputs, std::string& why) {
  if (!inputs.image_refusal.empty()) {
    why = inputs.image_refusal;
    return std::nullopt;
  }
  if (inputs.image.empty()) return std::nullopt;
  try {
    // A well-formed image of another tokenizer.json would encode every prompt wrongly.
    if (tok::peek_source_hash(inputs.image) != xxh3_128(inputs.json))
      throw std::runtime_error("tokenizer image: built from a different tokenizer.json");
    return Tokenizer::from_image(inputs.image, inputs.image_owner);
  } catch (const std::runtime_error& e) {
    why = e.what();
    return std::nullopt;
  }
}

}  // namespace

std::optional<LoadedTokenizer> load_tokenizer(const TokenizerInputs& inputs) {
  if (inputs.json.empty()) return std::nullopt;
  std::string refused;
  if (std::optional<Tokenizer> shared = open_shared_image(inputs, refused))
    return LoadedTokenizer{std::move(*shared), TokenizerOrigin::kSharedImage};
  if (!refused.empty())
    warn_once(inputs, "the shared tokenizer image was refused (" + refused +
                          "); parsing the shared tokenizer.json instead");
  if (inputs.cache) {
    CachedTokenizer cached = load_tokenizer_cached(inputs.json, *inputs.cache);
    const TokenizerOrigin origin = cached.source == TokenizerSource::kParsed
                                       ? TokenizerOrigin::kParsed
                                       : TokenizerOrigin::kCachedImage;
    return LoadedTokenizer{std::move(cached.tokenizer), origin};
  }
  return LoadedTokenizer{Tokenizer::from_json(inputs.json), TokenizerOrigin::kParsed};
}

LoadedTokenizer load_tokenizer_file(const std::filesystem::path& path,
                                    const TokenizerCacheOptions& cache) {
  CachedTokenizer cached = load_tokenizer_file_cached(path, cache);
  const TokenizerOrigin origin = cached.source == TokenizerSource::kParsed
                                     ? TokenizerOrigin::kParsed
                                     : TokenizerOrigin::kCachedImage;
  return {std::move(cached.tokenizer), origin};
}

const char* origin_name(TokenizerOrigin origin) {
  switch (origin) {
    case TokenizerOrigin::kSharedImage:
      return "shared-image";
    case TokenizerOrigin::kCachedImage:
      return "cached-image";
    case TokenizerOrigin::kParsed:
      break;
  }
  return "parsed";
}

}  // namespace hearth
