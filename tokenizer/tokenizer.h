// hearth's tokenizer: reads a Hugging Face tokenizer.json and encodes/decodes exactly as HF
// `tokenizers` does (byte-level BPE with regex pre-split for GPT-2 / Llama 3 / Qwen, and
// SentencePiece-style BPE with byte fallback for Llama 2 / Mistral). See README.md beside this
// file for the supported components and the behaviour on invalid input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hearth {

namespace tok {
class TokenizerImpl;
}  // namespace tok

// Immutable once loaded. Copies are cheap (they share the loaded tables) and every method is
// safe to call from many threads at once.
//
// Two ways in: parse a tokenizer.json (from_json, from_file: ~0.4 s for Llama 3's 128k tokens),
// or open a tokenizer image (from_image, from_image_file: a few ms), the loaded tables in one
// flat, checked block that build_image makes once and any process maps and encodes from in
// place. Both give identical results. tokenizer_cache.h keeps images keyed by tokenizer.json.
class Tokenizer {
 public:
  // Parses a tokenizer.json document. Throws std::runtime_error naming the problem and its
  // JSON location (invalid JSON, an unsupported component, a merge or template naming a token
  // that is not in the vocabulary, ...).
  static Tokenizer from_json(std::string_view tokenizer_json);
  // `path` is a tokenizer.json file or a model directory containing one.
  static Tokenizer from_file(const std::filesystem::path& path);

  // The tokenizer image of a tokenizer.json document (README.md, "Tokenizer image"). Checks
  // the document exactly as from_json does and throws the same errors.
  static std::vector<std::byte> build_image(std::string_view tokenizer_json);
  // Opens an image in place, without copying or rebuilding its tables. The bytes must be
  // 8-byte aligned and stay mapped and unchanged while this tokenizer or any copy of it lives:
  // `owner`, when given, is kept alive that long (a mapping, a buffer); without it that is the
  // caller's promise. The whole image is checked first (header, version, checksum, every
  // offset and id); a bad one throws std::runtime_error "tokenizer image: ..." saying what is
  // wrong.
  static Tokenizer from_image(std::span<const std::byte> image,
                              std::shared_ptr<const void> owner = nullptr);
  // Maps an image file read-only and opens it; the tokenizer holds the mapping.
  static Tokenizer from_image_file(const std::filesystem::path& path);

  // Token ids of `text`; with add_special_tokens the post-processor's template (BOS/EOS) is
  // applied. Text that is not valid UTF-8 is first repaired: each maximal ill-formed byte
  // sequence becomes U+FFFD, as Python's bytes.decode("utf-8", "replace") does, so the ids
  // equal HF's for the repaired string. Never throws for any input bytes.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;

  // Text of `ids`. Ids outside the vocabulary (models often pad theirs) decode to nothing;
  // with skip_special_tokens the special added tokens are dropped too.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token's spelling in the vocabulary ("" for an id outside it).
  std::string id_to_token(int32_t id) const;
  // Number of distinct tokens, added tokens included (HF get_vocab_size(true)).
  size_t vocab_size() const;
  bool is_special(int32_t id) const;
  // The bytes token `id` adds to a decoded text, for grammars over bytes (structured output):
  // "" for special tokens and ids outside the vocabulary. Tokens that are part of a UTF-8
  // character (byte-level and byte-fallback vocabularies) give their raw bytes.
  std::string token_bytes(int32_t id) const;

 private:
  friend class StreamDecoder;
  explicit Tokenizer(std::shared_ptr<const tok::TokenizerImpl> impl);
  std::shared_ptr<const tok::TokenizerImpl> impl_;
};

// The tokenizer.json of a model directory, or `path` itself when it is not a directory.
std::filesystem::path tokenizer_json_path(const std::filesystem::path& path);

// Streaming detokenisation for a worker printing tokens as they are generated. push() returns
// only complete UTF-8 text and holds back what a later token could still change (an
// incomplete character, a run of byte-fallback tokens, a strippable trailing character); the
// concatenation of every push() and the final finish() equals Tokenizer::decode of all ids.
// O(1) amortised per token. One instance per stream; not thread-safe. finish() also resets it
// for a new stream.
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens);
  ~StreamDecoder();
  StreamDecoder(StreamDecoder&&) noexcept;
  StreamDecoder& operator=(StreamDecoder&&) noexcept;

  std::string push(int32_t id);
  std::string finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace hearth
