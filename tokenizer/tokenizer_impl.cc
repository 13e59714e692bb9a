#include "tokenizer_impl.h"

#include "image_builder.h"
#include "utf8.h"

namespace hearth::tok {
namespace {

const Json& optional_member(const Json& root, const char* key) {
  static const Json null_json;
  const auto it = root.find(key);
  return it == root.end() ? null_json : *it;
}

}  // namespace

TokenizerImpl::TokenizerImpl(const Json& root, const BpeTables& tables,
                             std::shared_ptr<const void> storage)
    : storage_(std::move(storage)) {
  if (!root.is_object()) config_error("(root)", "expected an object");
  // Truncation changes what encode returns; hearth always returns every token.
  if (!optional_member(root, "truncation").is_null()) {
    config_error("truncation", "truncation is not supported; set it to null");
  }
  if (const Json& padding = optional_member(root, "padding"); !padding.is_null()) {
    // BatchLongest pads nothing when encoding one text; a fixed length would add ids.
    const auto strategy = padding.is_object() ? padding.find("strategy") : padding.end();
    if (strategy == padding.end() || *strategy != "BatchLongest") {
      config_error("padding", "only null or the BatchLongest strategy is supported");
    }
  }
  model_ = std::make_unique<BpeModel>(bpe_model_of(root), "model", tables);
  normalizer_ = make_normalizer(optional_member(root, "normalizer"), "normalizer");
  pre_tokenizer_ = make_pre_tokenizer(optional_member(root, "pre_tokenizer"), "pre_tokenizer");
  decoder_ = make_decoder(optional_member(root, "decoder"), "decoder");
  added_ = AddedVocabulary::from_json(optional_member(root, "added_tokens"), "added_tokens",
                                      *model_, normalizer_.get());
  post_processor_ = make_post_processor(optional_member(root, "post_processor"), "post_processor",
                                        [this](int32_t id) { return content_of(id).has_value(); });
}

std::optional<std::string_view> TokenizerImpl::token_of(int32_t id) const {
  if (const AddedToken* t = added_.find(id)) return t->decoded;
  std::string_view token;
  if (model_->id_to_token(id, &token)) return token;
  return std::nullopt;
}

std::optional<std::string_view> TokenizerImpl::content_of(int32_t id) const {
  if (const AddedToken* t = added_.find(id)) return t->content;
  std::string_view token;
  if (model_->id_to_token(id, &token)) return token;
  return std::nullopt;
}

void TokenizerImpl::encode(std::string_view text, bool add_special_tokens,
                           std::vector<int32_t>& out) const {
  out.clear();
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = repair_utf8(text);
    text = repaired;
  }
  // 1. Added tokens spelled in the raw text; 2. normalization of the rest (inside
  // encode_normalized, which also finds tokens spelled in normalized form); 3. pre-tokenizer;
  // 4. model; 5. post-processor.
  std::vector<AddedVocabulary::Piece> pieces;
  added_.split(text, /*normalized_tokens=*/false, pieces);
  for (const AddedVocabulary::Piece& p : pieces) {
    if (p.id >= 0) {
      out.push_back(p.id);
      continue;
    }
    std::string normalized(text.substr(p.begin, p.end - p.begin));
    size_t inserted_prefix = 0;
    if (normalizer_) normalizer_->normalize(normalized, inserted_prefix);
    encode_normalized(std::move(normalized), p.begin == 0, inserted_prefix, out);
  }
  if (post_processor_) post_processor_->process(out, add_special_tokens);
}

void TokenizerImpl::encode_normalized(std::string normalized, bool at_origin,
                                      size_t inserted_prefix, std::vector<int32_t>& out) const {
  PreTokenized pt;
  auto encode_piece = [&](std::string text, bool origin, size_t inserted) {
    pt.reset(std::move(text), origin, inserted);
    if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pt);
    for (const Word& w : pt.words) {
      model_->tokenize(std::string_view(pt.text).substr(w.begin, w.end - w.begin), out);
    }
  };
  if (!added_.has_normalized_tokens()) {
    encode_piece(std::move(normalized), at_origin, inserted_prefix);
    return;
  }
  std::vector<AddedVocabulary::Piece> pieces;
  added_.split(normalized, /*normalized_tokens=*/true, pieces);
  for (const AddedVocabulary::Piece& p : pieces) {
    if (p.id >= 0) {
      out.push_back(p.id);
      continue;
    }
    const bool origin = at_origin && p.begin <= inserted_prefix;
    const size_t inserted = origin ? std::min(inserted_prefix - p.begin, p.end - p.begin) : 0;
    encode_piece(normalized.substr(p.begin, p.end - p.begin), origin, inserted);
  }
}

}  // namespace hearth::tok
