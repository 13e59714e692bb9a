#include "decoder.h"

#include <cstdint>
#include <optional>

#include "byte_level.h"
#include "pattern.h"
#include "pre_tokenizer.h"
#include "utf8.h"

namespace hearth::tok {
namespace {

// ---------------------------------------------------------------------------------------------
// ByteLevel: every token's characters back to bytes (a token using characters outside the
// alphabet, such as an added token, contributes its own UTF-8), then one lossy UTF-8 string.

std::string byte_level_bytes(std::string_view token) {
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
  std::string bytes;
  bytes.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    size_t len = 0;
    const int b = alphabet.decode(utf8_decode(token, i, &len));
    if (b < 0) return std::string(token);
    bytes.push_back(static_cast<char>(b));
    i += len;
  }
  return bytes;
}

class ByteLevelStage final : public DecodeSink {
 public:
  explicit ByteLevelStage(DecodeSink& next) : next_(next) {}
  void begin_token() override { token_.clear(); }
  void text(std::string_view fragment) override { token_.append(fragment); }
  void end_token() override {
    out_.clear();
    repairer_.push(byte_level_bytes(token_), out_);
    forward();
  }
  void finish() override {
    out_.clear();
    repairer_.finish(out_);
    forward();
    if (!started_) next_.begin_token();
    next_.end_token();
    next_.finish();
    started_ = false;
  }

 private:
  // The whole stream is one output token, as the batch form returns a single string.
  void forward() {
    if (out_.empty()) return;
    if (!started_) next_.begin_token();
    started_ = true;
    next_.text(out_);
  }

  DecodeSink& next_;
  std::string token_;
  std::string out_;
  Utf8Repairer repairer_;
  bool started_ = false;
};

class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) bytes += byte_level_bytes(t);
    tokens.assign(1, repair_utf8(bytes));
  }
  std::unique_ptr<DecodeSink> make_stage(DecodeSink& next) const override {
    return std::make_unique<ByteLevelStage>(next);
  }
};

// ---------------------------------------------------------------------------------------------
// ByteFallback: runs of <0xAB> tokens become the text their bytes spell, or one U+FFFD per
// byte when the run as a whole is not valid UTF-8.

std::optional<uint8_t> fallback_byte(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return std::nullopt;
  // Two hex digits, or '+' and one, as Rust's u8::from_str_radix(_, 16) accepts.
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int lo = hex(token[4]);
  if (lo < 0) return std::nullopt;
  if (token[3] == '+') return static_cast<uint8_t>(lo);
  const int hi = hex(token[3]);
  if (hi < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

template <typename Emit>
void flush_byte_run(std::string& run, Emit&& emit) {
  if (run.empty()) return;
  if (is_valid_utf8(run)) {
    emit(std::string_view(run));
  } else {
    for (size_t k = 0; k < run.size(); ++k) emit(kReplacementUtf8);
  }
  run.clear();
}

class ByteFallbackStage final : public DecodeSink {
 public:
  explicit ByteFallbackStage(DecodeSink& next) : next_(next) {}
  void begin_token() override { token_.clear(); }
  void text(std::string_view fragment) override { token_.append(fragment); }
  void end_token() override {
    if (const auto byte = fallback_byte(token_)) {
      run_.push_back(static_cast<char>(*byte));  // held until the run ends
      return;
    }
    flush();
    emit(token_);
  }
  void finish() override {
    flush();
    next_.finish();
  }

 private:
  void emit(std::string_view token) {
    next_.begin_token();
    next_.text(token);
    next_.end_token();
  }
  void flush() {
    flush_byte_run(run_, [&](std::string_view t) { emit(t); });
  }

  DecodeSink& next_;
  std::string token_;
  std::string run_;
};

class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;
    auto emit = [&](std::string_view t) { out.emplace_back(t); };
    for (std::string& t : tokens) {
      if (const auto byte = fallback_byte(t)) {
        run.push_back(static_cast<char>(*byte));
        continue;
      }
      flush_byte_run(run, emit);
      out.push_back(std::move(t));
    }
    flush_byte_run(run, emit);
    tokens = std::move(out);
  }
  std::unique_ptr<DecodeSink> make_stage(DecodeSink& next) const override {
    return std::make_unique<ByteFallbackStage>(next);
  }
};

// ---------------------------------------------------------------------------------------------
// Fuse: all tokens become one.

class FuseStage final : public DecodeSink {
 public:
  explicit FuseStage(DecodeSink& next) : next_(next) {}
  void begin_token() override {
    if (!started_) next_.begin_token();
    started_ = true;
  }
  void text(std::string_view fragment) override { next_.text(fragment); }
  void end_token() override {}
  void finish() override {
    if (!started_) next_.begin_token();
    next_.end_token();
    next_.finish();
    started_ = false;
  }

 private:
  DecodeSink& next_;
  bool started_ = false;
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string joined;
    for (const std::string& t : tokens) joined += t;
    tokens.assign(1, std::move(joined));
  }
  std::unique_ptr<DecodeSink> make_stage(DecodeSink& next) const override {
    return std::make_unique<FuseStage>(next);
  }
};

// ---------------------------------------------------------------------------------------------
// Strip: removes up to `start` leading and up to `stop` trailing `content` characters of each
// token. (The reference panics when both ends overlap on a token made only of `content`;
// here that token simply becomes empty.)

class StripStage final : public DecodeSink {
 public:
  StripStage(DecodeSink& next, uint32_t content, size_t start, size_t stop)
      : next_(next), content_(content), start_(start), stop_(stop) {
    append_utf8(content_utf8_, content);
  }
  void begin_token() override {
    lead_left_ = start_;
    held_ = 0;
    next_.begin_token();
  }
  void text(std::string_view fragment) override {
    out_.clear();
    for (size_t i = 0; i < fragment.size();) {
      size_t len = 0;
      const uint32_t cp = utf8_decode(fragment, i, &len);
      const std::string_view ch = fragment.substr(i, len);
      i += len;
      if (lead_left_ > 0) {
        if (cp == content_) {
          --lead_left_;
          continue;
        }
        lead_left_ = 0;
      }
      if (cp == content_ && stop_ > 0) {
        // Possibly trailing: hold up to `stop` of them until we know what follows.
        if (++held_ > stop_) {
          out_ += content_utf8_;
          --held_;
        }
        continue;
      }
      for (; held_ > 0; --held_) out_ += content_utf8_;
      out_ += ch;
    }
    if (!out_.empty()) next_.text(out_);
  }
  void end_token() override {
    held_ = 0;  // the held characters were trailing: stripped
    next_.end_token();
  }
  void finish() override { next_.finish(); }

 private:
  DecodeSink& next_;
  uint32_t content_;
  std::string content_utf8_;
  size_t start_;
  size_t stop_;
  size_t lead_left_ = 0;
  size_t held_ = 0;
  std::string out_;
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(uint32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}

  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      std::vector<std::pair<uint32_t, size_t>> chars;  // code point, byte offset
      for (size_t i = 0; i < token.size();) {
        size_t len = 0;
        chars.emplace_back(utf8_decode(token, i, &len), i);
        i += len;
      }
      size_t start_cut = 0;
      for (size_t k = 0; k < chars.size() && k < start_ && chars[k].first == content_; ++k) {
        start_cut = k + 1;
      }
      size_t stop_cut = chars.size();
      for (size_t k = 0; k < std::min(stop_, chars.size() - start_cut); ++k) {
        const size_t index = chars.size() - k - 1;
        if (chars[index].first != content_) break;
        stop_cut = index;
      }
      const size_t b = start_cut < chars.size() ? chars[start_cut].second : token.size();
      const size_t e = stop_cut < chars.size() ? chars[stop_cut].second : token.size();
      token = token.substr(b, e - b);
    }
  }
  std::unique_ptr<DecodeSink> make_stage(DecodeSink& next) const override {
    return std::make_unique<StripStage>(next, content_, start_, stop_);
  }

 private:
  uint32_t content_;
  size_t start_;
  size_t stop_;
};

// ---------------------------------------------------------------------------------------------
// Replace: pattern -> content within each token.

class ReplaceStage final : public DecodeSink {
 public:
  ReplaceStage(DecodeSink& next, const Pattern& pattern, const std::string& content)
      : next_(next), pattern_(pattern), content_(content), single_(pattern.single_char()) {
    if (single_) append_utf8(single_utf8_, *single_);
  }
  void begin_token() override {
    if (single_) {
      next_.begin_token();
    } else {
      token_.clear();
    }
  }
  void text(std::string_view fragment) override {
    if (!single_) {
      token_.append(fragment);  // a match may span fragments: wait for the whole token
      return;
    }
    out_.clear();
    size_t last = 0;
    for (size_t pos = fragment.find(single_utf8_); pos != std::string_view::npos;
         pos = fragment.find(single_utf8_, pos + single_utf8_.size())) {
      out_.append(fragment.substr(last, pos - last));
      out_.append(content_);
      last = pos + single_utf8_.size();
    }
    out_.append(fragment.substr(last));
    if (!out_.empty()) next_.text(out_);
  }
  void end_token() override {
    if (!single_) {
      next_.begin_token();
      const std::string replaced = pattern_.replace_all(token_, content_);
      if (!replaced.empty()) next_.text(replaced);
    }
    next_.end_token();
  }
  void finish() override { next_.finish(); }

 private:
  DecodeSink& next_;
  const Pattern& pattern_;
  const std::string& content_;
  std::optional<uint32_t> single_;
  std::string single_utf8_;
  std::string token_;
  std::string out_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) t = pattern_.replace_all(t, content_);
  }
  std::unique_ptr<DecodeSink> make_stage(DecodeSink& next) const override {
    return std::make_unique<ReplaceStage>(next, pattern_, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// ---------------------------------------------------------------------------------------------
// Metaspace: the replacement character back to a space; in the first token it is dropped
// instead (it was the prefix the pre-tokenizer added), unless prepend_scheme is "never".

class MetaspaceStage final : public DecodeSink {
 public:
  MetaspaceStage(DecodeSink& next, uint32_t replacement, bool drop_in_first)
      : next_(next), replacement_(replacement), drop_in_first_(drop_in_first) {}
  void begin_token() override {
    ++index_;
    next_.begin_token();
  }
  void text(std::string_view fragment) override {
    out_.clear();
    const bool drop = index_ == 0 && drop_in_first_;
    for (size_t i = 0; i < fragment.size();) {
      size_t len = 0;
      const uint32_t cp = utf8_decode(fragment, i, &len);
      if (cp != replacement_) {
        out_.append(fragment.substr(i, len));
      } else if (!drop) {
        out_.push_back(' ');
      }
      i += len;
    }
    if (!out_.empty()) next_.text(out_);
  }
  void end_token() override { next_.end_token(); }
  void finish() override {
    index_ = -1;
    next_.finish();
  }

 private:
  DecodeSink& next_;
  uint32_t replacement_;
  bool drop_in_first_;
  int64_t index_ = -1;
  std::string out_;
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(uint32_t replacement, PrependScheme scheme)
      : replacement_(replacement), drop_in_first_(scheme != PrependScheme::kNever) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      std::string out;
      const std::string& t = tokens[k];
      for (size_t i = 0; i < t.size();) {
        size_t len = 0;
        const uint32_t cp = utf8_decode(t, i, &len);
        if (cp != replacement_) {
          out.append(t, i, len);
        } else if (!(k == 0 && drop_in_first_)) {
          out.push_back(' ');
        }
        i += len;
      }
      tokens[k] = std::move(out);
    }
  }
  std::unique_ptr<DecodeSink> make_stage(DecodeSink& next) const override {
    return std::make_unique<MetaspaceStage>(next, replacement_, drop_in_first_);
  }

 private:
  uint32_t replacement_;
  bool drop_in_first_;
};

// ---------------------------------------------------------------------------------------------
// Sequence: decoders applied in order.

class SequenceStage final : public DecodeSink {
 public:
  explicit SequenceStage(std::vector<std::unique_ptr<DecodeSink>> stages)
      : stages_(std::move(stages)) {}
  void begin_token() override { stages_.front()->begin_token(); }
  void text(std::string_view fragment) override { stages_.front()->text(fragment); }
  void end_token() override { stages_.front()->end_token(); }
  void finish() override { stages_.front()->finish(); }

 private:
  std::vector<std::unique_ptr<DecodeSink>> stages_;  // stages_[k] feeds stages_[k + 1]
};

// Passes everything through; the stream form of an empty Sequence.
class PassStage final : public DecodeSink {
 public:
  explicit PassStage(DecodeSink& next) : next_(next) {}
  void begin_token() override { next_.begin_token(); }
  void text(std::string_view fragment) override { next_.text(fragment); }
  void end_token() override { next_.end_token(); }
  void finish() override { next_.finish(); }

 private:
  DecodeSink& next_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& part : parts_) part->decode_chain(tokens);
  }
  std::unique_ptr<DecodeSink> make_stage(DecodeSink& next) const override {
    if (parts_.empty()) return std::make_unique<PassStage>(next);
    std::vector<std::unique_ptr<DecodeSink>> stages(parts_.size());
    DecodeSink* downstream = &next;
    for (size_t k = parts_.size(); k-- > 0;) {
      stages[k] = parts_[k]->make_stage(*downstream);
      downstream = stages[k].get();
    }
    return std::make_unique<SequenceStage>(std::move(stages));
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = component_type(j, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    return std::make_unique<StripDecoder>(get_char(j, "content", where),
                                          get_uint(j, "start", where, 0),
                                          get_uint(j, "stop", where, 0));
  }
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(
        Pattern::from_json(require(j, "pattern", where), where + ".pattern"),
        get_string(j, "content", where));
  }
  if (type == "Metaspace") {
    return std::make_unique<MetaspaceDecoder>(get_char(j, "replacement", where),
                                              prepend_scheme_from_json(j, where));
  }
  if (type == "Sequence") {
    const Json& list = require(j, "decoders", where);
    if (!list.is_array()) config_error(where + ".decoders", "expected an array");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      auto part = make_decoder(list[i], where + ".decoders[" + std::to_string(i) + "]");
      if (part) parts.push_back(std::move(part));
    }
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  unsupported_type(where, type,
                   "ByteFallback, ByteLevel, Fuse, Metaspace, Replace, Sequence, Strip");
}

}  // namespace hearth::tok
