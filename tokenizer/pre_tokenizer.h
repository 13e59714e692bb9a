// Pre-tokenizers of tokenizer.json (Split, ByteLevel, Metaspace, Digits, Sequence): cut
// normalized text into words, and for some, rewrite them, before the model sees each word.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "config.h"

namespace hearth::tok {

// A word is a byte range of PreTokenized::text.
struct Word {
  size_t begin = 0;
  size_t end = 0;
  // True when the word starts where the original input starts (Metaspace "first" needs it).
  bool at_origin = false;
  // Leading bytes inserted by a normalizer; a split inside them still starts "at the origin".
  size_t inserted_prefix = 0;
};

// The working state of pre-tokenization: text and the words cut from it so far.
struct PreTokenized {
  std::string text;
  std::vector<Word> words;

  // Starts with the whole of `normalized` as one word (none when it is empty).
  void reset(std::string normalized, bool at_origin, size_t inserted_prefix);
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(PreTokenized& pt) const = 0;
};

// Metaspace's rule for putting the replacement character in front of a word.
enum class PrependScheme { kFirst, kNever, kAlways };

// Reads prepend_scheme (or the older add_prefix_space) of a Metaspace component.
PrependScheme prepend_scheme_from_json(const Json& j, const std::string& where);

// nullptr for a JSON null (the whole normalized piece is one word).
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& j, const std::string& where);

}  // namespace hearth::tok
