// Post-processors of tokenizer.json: TemplateProcessing adds BOS/EOS-style special tokens
// around the encoded text when add_special_tokens is set; ByteLevel only adjusts offsets, so
// for ids it is a no-op; Sequence applies several in turn.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config.h"

namespace hearth::tok {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual void process(std::vector<int32_t>& ids, bool add_special_tokens) const = 0;
};

// nullptr for a JSON null. Every special token a template names must be defined, with ids
// that `known_id` accepts (ids of the vocabulary or the added tokens).
std::unique_ptr<PostProcessor> make_post_processor(const Json& j, const std::string& where,
                                                   const std::function<bool(int32_t)>& known_id);

}  // namespace hearth::tok
