#include <string>

#include "tokenizer.h"
#include "tokenizer_impl.h"

namespace hearth {
namespace {

// End of the stage chain: collects text until the caller takes it. Without a decoder the
// reference joins tokens with spaces, which this sink reproduces.
class CollectSink final : public tok::DecodeSink {
 public:
  explicit CollectSink(bool join_with_spaces) : join_with_spaces_(join_with_spaces) {}
  void begin_token() override {
    if (join_with_spaces_ && tokens_++ > 0) out_.push_back(' ');
  }
  void text(std::string_view fragment) override { out_.append(fragment); }
  void end_token() override {}
  void finish() override { tokens_ = 0; }
  std::string take() { return std::exchange(out_, std::string()); }

 private:
  bool join_with_spaces_;
  size_t tokens_ = 0;
  std::string out_;
};

}  // namespace

struct StreamDecoder::State {
  State(std::shared_ptr<const tok::TokenizerImpl> tokenizer, bool skip)
      : impl(std::move(tokenizer)),
        skip_special(skip),
        sink(impl->decoder() == nullptr),
        head(impl->decoder() != nullptr ? impl->decoder()->make_stage(sink) : nullptr) {}

  tok::DecodeSink& entry() { return head ? *head : static_cast<tok::DecodeSink&>(sink); }

  std::shared_ptr<const tok::TokenizerImpl> impl;  // keeps the tables alive
  bool skip_special;
  CollectSink sink;
  std::unique_ptr<tok::DecodeSink> head;  // first decoder stage, feeding `sink`
};

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : state_(std::make_unique<State>(tokenizer.impl_, skip_special_tokens)) {}

StreamDecoder::~StreamDecoder() = default;
StreamDecoder::StreamDecoder(StreamDecoder&&) noexcept = default;
StreamDecoder& StreamDecoder::operator=(StreamDecoder&&) noexcept = default;

std::string StreamDecoder::push(int32_t id) {
  const std::optional<std::string_view> token = state_->impl->token_of(id);
  if (!token) return {};
  if (state_->skip_special && state_->impl->is_special_content(*token)) return {};
  tok::DecodeSink& entry = state_->entry();
  entry.begin_token();
  entry.text(*token);
  entry.end_token();
  return state_->sink.take();
}

std::string StreamDecoder::finish() {
  state_->entry().finish();
  return state_->sink.take();
}

}  // namespace hearth
