// Decoders of tokenizer.json (ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace,
// Sequence) in two forms: batch, which rewrites the whole token list as the reference does,
// and streaming stages, which see one token at a time and hold back only what later tokens can
// still change (an incomplete UTF-8 sequence, a run of byte tokens, strippable trailing
// characters). Feeding all tokens through the stages gives exactly the batch result.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"

namespace hearth::tok {

// Receiver of a decoded token stream. Each token arrives as begin_token(), any number of
// text() fragments (whole UTF-8 characters), end_token(); finish() ends the stream.
class DecodeSink {
 public:
  virtual ~DecodeSink() = default;
  virtual void begin_token() = 0;
  virtual void text(std::string_view fragment) = 0;
  virtual void end_token() = 0;
  virtual void finish() = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Batch form: transforms the token strings in place (the reference's decode_chain).
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  // Streaming form: a stage that forwards its output to `next`, which must outlive it.
  virtual std::unique_ptr<DecodeSink> make_stage(DecodeSink& next) const = 0;
};

// nullptr for a JSON null (tokens are then joined with spaces).
std::unique_ptr<Decoder> make_decoder(const Json& j, const std::string& where);

}  // namespace hearth::tok
