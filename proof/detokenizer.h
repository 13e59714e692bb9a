// Turns generated token ids into text for the `text` contract and for reports: the model's own
// tokenizer when the harness has one (exactly Tokenizer::decode, special tokens skipped as the
// worker does), else the text pieces the worker streamed.
#pragma once

#include <optional>
#include <string>

#include "proof/worker_output.h"
#include "tokenizer/tokenizer.h"

namespace hearth::proof {

class Detokenizer {
 public:
  Detokenizer() = default;  // no tokenizer: streamed text
  explicit Detokenizer(Tokenizer tokenizer) : tokenizer_(std::move(tokenizer)) {}

  std::string text(const Generation& g) const {
    return tokenizer_ ? tokenizer_->decode(g.tokens, /*skip_special_tokens=*/true)
                      : g.streamed_text();
  }
  // "tokenizer" or "stream": where the text came from, for the report.
  const char* source() const { return tokenizer_ ? "tokenizer" : "stream"; }

 private:
  std::optional<Tokenizer> tokenizer_;
};

}  // namespace hearth::proof
