// tokenizer.json -> the two parts of a tokenizer: the small settings (everything but the
// vocabulary and the merges, kept as JSON) and the large BPE tables in their image layout.
// Tokenizer::from_json opens these directly; Tokenizer::build_image writes them as an image.
#pragma once

#include <string_view>

#include "bpe_tables.h"
#include "config.h"

namespace hearth::tok {

struct TokenizerParts {
  Json settings;  // tokenizer.json without model.vocab and model.merges
  BpeTableData tables;
};

// Throws std::runtime_error for invalid JSON and for a model that cannot be built (naming the
// JSON location); the settings themselves are checked when a TokenizerImpl is made of them.
TokenizerParts build_tokenizer_parts(std::string_view tokenizer_json);

// The "model" object of a tokenizer.json root, refused unless it is a BPE model.
const Json& bpe_model_of(const Json& root);

}  // namespace hearth::tok
