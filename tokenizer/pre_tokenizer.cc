#include "pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include "byte_level.h"
#include "pattern.h"
#include "unicode.h"
#include "utf8.h"

namespace hearth::tok {

void PreTokenized::reset(std::string normalized, bool at_origin, size_t inserted_prefix) {
  text = std::move(normalized);
  words.clear();
  if (!text.empty()) words.push_back({0, text.size(), at_origin, inserted_prefix});
}

namespace {

// Segments (delimiter or not) covering `s`, from the delimiter matches that `each_match`
// reports in order.
template <typename EachMatch>
void segments_from_matches(std::string_view s, bool invert, std::vector<Segment>& out,
                           EachMatch&& each_match) {
  size_t prev = 0;
  each_match([&](size_t begin, size_t end) {
    if (prev != begin) out.push_back({prev, begin, invert});
    out.push_back({begin, end, !invert});
    prev = end;
  });
  if (prev != s.size()) out.push_back({prev, s.size(), invert});
}

// Each character for which pred holds is its own delimiter.
template <typename Pred>
void char_segments(std::string_view s, std::vector<Segment>& out, Pred&& pred) {
  segments_from_matches(s, false, out, [&](auto&& emit) {
    for (size_t i = 0; i < s.size();) {
      size_t len = 0;
      const uint32_t cp = utf8_decode(s, i, &len);
      if (pred(cp)) emit(i, i + len);
      i += len;
    }
  });
}

Word sub_word(const Word& w, size_t begin, size_t end) {
  Word out{w.begin + begin, w.begin + end, false, 0};
  if (w.at_origin && begin <= w.inserted_prefix) {
    out.at_origin = true;
    out.inserted_prefix = std::min(w.inserted_prefix - begin, end - begin);
  }
  return out;
}

// Cuts every word with `make_segments(word_text, segments)` and the delimiter behaviour.
template <typename MakeSegments>
void split_words(PreTokenized& pt, SplitBehavior behavior, MakeSegments&& make_segments) {
  std::vector<Word> out;
  out.reserve(pt.words.size());
  std::vector<Segment> segments;
  std::vector<std::pair<size_t, size_t>> pieces;
  for (const Word& w : pt.words) {
    const std::string_view s(pt.text.data() + w.begin, w.end - w.begin);
    segments.clear();
    make_segments(s, segments);
    apply_split_behavior(segments, behavior, pieces);
    for (const auto& [b, e] : pieces) out.push_back(sub_word(w, b, e));
  }
  pt.words = std::move(out);
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}

  void pre_tokenize(PreTokenized& pt) const override {
    split_words(pt, behavior_, [&](std::string_view s, std::vector<Segment>& segments) {
      segments_from_matches(s, invert_, segments,
                            [&](auto&& emit) { pattern_.for_each_match(s, emit); });
    });
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class DigitsPreTokenizer final : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}

  void pre_tokenize(PreTokenized& pt) const override {
    split_words(pt, individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
                [](std::string_view s, std::vector<Segment>& segments) {
                  char_segments(s, segments, is_numeric);
                });
  }

 private:
  bool individual_;
};

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(uint32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {
    append_utf8(replacement_utf8_, replacement);
  }

  void pre_tokenize(PreTokenized& pt) const override {
    std::string text;
    text.reserve(pt.text.size() + pt.text.size() / 4 + 8);
    std::vector<Word> words;
    std::vector<Segment> segments;
    std::vector<std::pair<size_t, size_t>> pieces;
    std::string piece;
    for (const Word& w : pt.words) {
      const std::string_view s(pt.text.data() + w.begin, w.end - w.begin);
      // Spaces become the replacement first; only then is the prefix decided, so a word that
      // started with a space is not given a second one.
      piece.clear();
      for (const char c : s) {
        if (c == ' ') {
          piece += replacement_utf8_;
        } else {
          piece.push_back(c);
        }
      }
      const bool starts_with_replacement = piece.starts_with(replacement_utf8_);
      bool prepend = false;
      if (scheme_ == PrependScheme::kAlways) prepend = !starts_with_replacement;
      if (scheme_ == PrependScheme::kFirst) prepend = !starts_with_replacement && w.at_origin;
      if (prepend) piece.insert(0, replacement_utf8_);

      const Word whole{text.size(), text.size() + piece.size(), w.at_origin,
                       prepend ? replacement_utf8_.size() : 0};
      text += piece;
      if (!split_) {
        words.push_back(whole);
        continue;
      }
      segments.clear();
      char_segments(piece, segments, [&](uint32_t cp) { return cp == replacement_; });
      apply_split_behavior(segments, SplitBehavior::kMergedWithNext, pieces);
      for (const auto& [b, e] : pieces) words.push_back(sub_word(whole, b, e));
    }
    pt.text = std::move(text);
    pt.words = std::move(words);
  }

 private:
  uint32_t replacement_;
  std::string replacement_utf8_;
  PrependScheme scheme_;
  bool split_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}

  void pre_tokenize(PreTokenized& pt) const override {
    const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
    std::string text;
    text.reserve(pt.text.size() + pt.text.size() / 2 + 8);
    std::vector<Word> words;
    words.reserve(pt.words.size());
    std::string prefixed;
    std::vector<Segment> segments;
    std::vector<std::pair<size_t, size_t>> pieces;
    for (const Word& w : pt.words) {
      std::string_view s(pt.text.data() + w.begin, w.end - w.begin);
      if (add_prefix_space_ && !s.starts_with(' ')) {
        prefixed.assign(" ");
        prefixed.append(s);
        s = prefixed;
      }
      auto emit = [&](size_t b, size_t e) {
        const size_t start = text.size();
        alphabet.encode_all(s.substr(b, e - b), text);
        words.push_back({start, text.size(), w.at_origin && b == 0, 0});
      };
      if (!use_regex_) {
        emit(0, s.size());
        continue;
      }
      segments.clear();
      segments_from_matches(s, false, segments,
                            [&](auto&& on_match) { gpt2_regex().for_each_match(s, on_match); });
      apply_split_behavior(segments, SplitBehavior::kIsolated, pieces);
      for (const auto& [b, e] : pieces) emit(b, e);
    }
    pt.text = std::move(text);
    pt.words = std::move(words);
  }

 private:
  // The GPT-2 split pattern that ByteLevel applies when use_regex is set.
  static const Regex& gpt2_regex() {
    static const Regex regex(
        R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)");
    return regex;
  }

  bool add_prefix_space_;
  bool use_regex_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void pre_tokenize(PreTokenized& pt) const override {
    for (const auto& part : parts_) part->pre_tokenize(pt);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

}  // namespace

PrependScheme prepend_scheme_from_json(const Json& j, const std::string& where) {
  // Files from before prepend_scheme existed say add_prefix_space instead.
  const bool add_prefix_space = get_bool(j, "add_prefix_space", where, true);
  const auto it = j.find("prepend_scheme");
  if (it == j.end() || it->is_null()) {
    return add_prefix_space ? PrependScheme::kAlways : PrependScheme::kNever;
  }
  if (!it->is_string()) config_error(where + ".prepend_scheme", "expected a string");
  const std::string s = it->get<std::string>();
  PrependScheme scheme;
  if (s == "first") {
    scheme = PrependScheme::kFirst;
  } else if (s == "never") {
    scheme = PrependScheme::kNever;
  } else if (s == "always") {
    scheme = PrependScheme::kAlways;
  } else {
    config_error(where + ".prepend_scheme",
                 "'" + s + "' is not supported (supported: first, never, always)");
  }
  if (!add_prefix_space && scheme != PrependScheme::kNever) {
    config_error(where, "add_prefix_space false contradicts prepend_scheme '" + s + "'");
  }
  return scheme;
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = component_type(j, where);
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(
        Pattern::from_json(require(j, "pattern", where), where + ".pattern"),
        split_behavior_from_json(require(j, "behavior", where), where + ".behavior"),
        get_bool(j, "invert", where, false));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(get_bool(j, "add_prefix_space", where, true),
                                                   get_bool(j, "use_regex", where, true));
  }
  if (type == "Metaspace") {
    return std::make_unique<MetaspacePreTokenizer>(get_char(j, "replacement", where),
                                                   prepend_scheme_from_json(j, where),
                                                   get_bool(j, "split", where, true));
  }
  if (type == "Digits") {
    return std::make_unique<DigitsPreTokenizer>(get_bool(j, "individual_digits", where, false));
  }
  if (type == "Sequence") {
    const Json& list = require(j, "pretokenizers", where);
    if (!list.is_array()) config_error(where + ".pretokenizers", "expected an array");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      auto part = make_pre_tokenizer(list[i], where + ".pretokenizers[" + std::to_string(i) + "]");
      if (part) parts.push_back(std::move(part));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  unsupported_type(where, type, "ByteLevel, Digits, Metaspace, Sequence, Split");
}

}  // namespace hearth::tok
