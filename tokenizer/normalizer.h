// Normalizers of tokenizer.json (NFC, Prepend, Replace, Sequence): rewrite each piece of input
// text that is not an added token, before pre-tokenization.
#pragma once

#include <memory>
#include <string>

#include "config.h"

namespace hearth::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites `text` in place. `inserted_prefix` counts bytes added in front of the original
  // text (Prepend); Metaspace's prepend_scheme "first" treats them as the start of the input.
  virtual void normalize(std::string& text, size_t& inserted_prefix) const = 0;
};

// nullptr for a JSON null (no normalizer). Unsupported types are refused by name.
std::unique_ptr<Normalizer> make_normalizer(const Json& j, const std::string& where);

}  // namespace hearth::tok
