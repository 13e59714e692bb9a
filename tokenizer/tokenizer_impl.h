// The loaded pipeline behind hearth::Tokenizer: added tokens, normalizer, pre-tokenizer, BPE
// model, post-processor and decoder, wired as in HF `tokenizers`. Internal to the library.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "added_tokens.h"
#include "bpe_model.h"
#include "config.h"
#include "decoder.h"
#include "normalizer.h"
#include "post_processor.h"
#include "pre_tokenizer.h"

namespace hearth::tok {

class TokenizerImpl {
 public:
  // `settings` is tokenizer.json without model.vocab and model.merges (see image_builder.h);
  // `tables` are those two, built or mapped, in memory that `storage` keeps alive (or that
  // outlives this object when `storage` is null). Throws std::runtime_error naming the JSON
  // location of a setting that is invalid or unsupported.
  TokenizerImpl(const Json& settings, const BpeTables& tables, std::shared_ptr<const void> storage);

  void encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) const;

  // The spelling that decoding uses for an id (added tokens first, in normalized form when
  // they are normalized), or nullopt.
  std::optional<std::string_view> token_of(int32_t id) const;
  // The spelling in the file (added tokens first), or nullopt.
  std::optional<std::string_view> content_of(int32_t id) const;
  // Whether decode with skip_special_tokens drops this spelling.
  bool is_special_content(std::string_view token) const { return added_.is_special_content(token); }

  const BpeModel& model() const { return *model_; }
  const AddedVocabulary& added() const { return added_; }
  const Decoder* decoder() const { return decoder_.get(); }

 private:
  void encode_normalized(std::string normalized, bool at_origin, size_t inserted_prefix,
                         std::vector<int32_t>& out) const;

  std::shared_ptr<const void> storage_;  // first: the tables below point into it
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  AddedVocabulary added_;
};

}  // namespace hearth::tok
