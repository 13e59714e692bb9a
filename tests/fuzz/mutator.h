// Seeded mutations of text and binary inputs, in the spirit of libFuzzer's, but deterministic:
// the same seed always gives the same input, so a failure in CI reproduces from its case number.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/fuzz_rng.h"

namespace hearth::fuzz {

// Pieces a JSON reader must get right: structure, edge-case numbers and strings, bytes that
// are not UTF-8.
inline const std::vector<std::string_view>& json_dictionary() {
  static const std::vector<std::string_view> words = {
      "{",
      "}",
      "[",
      "]",
      "\"",
      ":",
      ",",
      "null",
      "true",
      "false",
      "0",
      "-1",
      "1",
      "2",
      "1.5",
      "-0",
      "1e308",
      "1e400",
      "-1e-400",
      "4294967296",
      "2147483648",
      "1073741824",
      "18446744073709551615",
      "18446744073709551616",
      "-9223372036854775809",
      "\"\"",
      "\"\\u0000\"",
      "\"\\ud800\"",
      "\"\\udc00\\ud800\"",
      "\"\\\"",
      "\xff",
      "\xc0\x80",
      "\xed\xa0\x80",
      "\xf4\x90\x80\x80",
      "\xe2\x82",
      "[]",
      "{}",
      "[[[[",
      "]]]]",
      "\"a\":1,",
      "\"type\":",
      "\"BPE\"",
      "\"vocab\":{}",
      "\"merges\":[]",
      "\"rope_scaling\":{\"rope_type\":"
      "\"llama3\",\"factor\":0}",
  };
  return words;
}

// One to four random edits of `s`.
inline void mutate(std::string& s, Rng& rng) {
  const size_t edits = 1 + rng.below(4);
  for (size_t e = 0; e < edits; ++e) {
    const size_t at = rng.below(s.size() + 1);
    switch (rng.below(7)) {
      case 0:  // overwrite a byte
        if (!s.empty()) s[rng.below(s.size())] = char(rng.next());
        break;
      case 1:  // flip a bit
        if (!s.empty()) s[rng.below(s.size())] ^= char(1 << rng.below(8));
        break;
      case 2:  // delete a run
        if (at < s.size()) s.erase(at, 1 + rng.below(16));
        break;
      case 3: {  // duplicate a run elsewhere
        if (s.empty()) break;
        const size_t from = rng.below(s.size());
        const std::string run = s.substr(from, 1 + rng.below(32));
        s.insert(rng.below(s.size() + 1), run);
        break;
      }
      case 4: {  // insert a dictionary word
        const auto& words = json_dictionary();
        s.insert(at, words[rng.below(words.size())]);
        break;
      }
      case 5: {  // replace a number with an edge-case one
        const size_t digit = s.find_first_of("0123456789", rng.below(s.size() + 1));
        if (digit == std::string::npos) break;
        const size_t end = s.find_first_not_of("0123456789.eE+-", digit);
        const std::string_view numbers[] = {
            "0",   "-1",    "1e308", "2147483647", "1073741824", "4194304", "18446744073709551615",
            "0.0", "1e-320"};
        s.replace(digit, (end == std::string::npos ? s.size() : end) - digit,
                  numbers[rng.below(std::size(numbers))]);
        break;
      }
      default:  // truncate
        s.resize(rng.below(s.size() + 1));
        break;
    }
  }
}

// `s` with `depth` nested arrays or objects opened at a random place (and closed, so that the
// rest of the text still parses when the place allows a value).
inline std::string nest(const std::string& s, size_t depth, Rng& rng) {
  const bool objects = rng.below(2);
  std::string deep;
  deep.reserve(depth * 6);
  for (size_t i = 0; i < depth; ++i) deep += objects ? "{\"a\":" : "[";
  deep += "1";
  deep.append(depth, objects ? '}' : ']');
  std::string out = s;
  // After a ':' is where a value goes; anywhere else is fine too.
  size_t at = s.find(':', rng.below(s.size() + 1));
  at = at == std::string::npos ? rng.below(s.size() + 1) : at + 1;
  if (at < out.size() && rng.below(2)) {
    const size_t end = out.find_first_of(",}", at);
    out.erase(at, (end == std::string::npos ? out.size() : end) - at);
  }
  out.insert(std::min(at, out.size()), deep);
  return out;
}

// A structure-aware edit for JSON text whose fields have types (request bodies): one value
// anywhere in the document replaced by a value of another type or an edge case, or one member
// removed. Byte edits rarely turn `true` into `5` and still parse; this does every time. Text
// that does not parse is left as it is.
inline void mutate_json_value(std::string& s, Rng& rng) {
  using ordered_json = nlohmann::ordered_json;
  ordered_json doc = ordered_json::parse(s, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return;
  std::vector<ordered_json*> values = {&doc};
  for (size_t i = 0; i < values.size(); ++i)  // breadth first: every value of the document
    if (values[i]->is_structured())
      for (ordered_json& child : *values[i]) values.push_back(&child);
  ordered_json& target = *values[rng.below(values.size())];
  if (target.is_object() && !target.empty() && rng.below(4) == 0) {
    auto it = target.begin();
    std::advance(it, rng.below(target.size()));
    target.erase(it.key());
  } else {
    static const std::vector<ordered_json> replacements = {
        nullptr,
        true,
        false,
        0,
        -1,
        5,
        1.5,
        1e308,
        uint64_t(18446744073709551615ull),
        int64_t(INT64_MIN),
        "",
        "x",
        "text",
        ordered_json::array(),
        ordered_json::array({5}),
        ordered_json::array({"x"}),
        ordered_json::array({ordered_json::array({1, 2})}),
        ordered_json::object(),
        ordered_json{{"type", 5}},
        ordered_json{{"type", "text"}, {"text", "x"}},
        ordered_json{{"role", "user"}, {"content", ordered_json::array({5})}},
        std::string(2000, 'a')};
    target = replacements[rng.below(replacements.size())];
  }
  s = doc.dump();
}

}  // namespace hearth::fuzz
