// A real tokenizer for a synthetic model (hearth-synth --tokenizer): its tokenizer.json and the
// tokenizer_config.json beside it, with what the model's config must agree with: the vocabulary
// size its ids need and its BOS/EOS ids.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace hearth {

struct RealTokenizer {
  std::string tokenizer_json;
  std::string tokenizer_config_json;      // "" when there is none beside tokenizer.json
  int64_t vocab_needed = 0;               // the largest id in the vocabulary or added tokens, + 1
  std::optional<int64_t> bos_id, eos_id;  // tokenizer_config.json's bos_token / eos_token
};

// `path` is a tokenizer.json or a directory holding one. Throws std::runtime_error naming the
// file when it cannot be read or is not a tokenizer.json with a vocabulary.
RealTokenizer read_real_tokenizer(const std::filesystem::path& path);

}  // namespace hearth
