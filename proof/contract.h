// Contracts: what "the same output" means in a proof run, and the comparison of two
// generations under one. `exact`: identical token ids; `text`: identical detokenised text;
// `logprob:EPS`: identical token ids and every |logprob difference| <= EPS.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "proof/worker_output.h"

namespace hearth::proof {

struct Contract {
  enum class Kind { Exact, Text, Logprob };
  Kind kind = Kind::Exact;
  double epsilon = 0;  // logprob only

  // "exact" | "text" | "logprob:EPS" (EPS a finite number >= 0). Throws std::runtime_error.
  static Contract parse(std::string_view text);
  std::string name() const;  // parses back to the same contract
};

// Where two token streams first differ, with enough around it to see why.
struct TokenDivergence {
  size_t index = 0;                         // first position where the two differ
  std::optional<int32_t> a_token, b_token;  // nullopt: that side had already ended
  std::string before;                       // the shared streamed text just before it (its tail)
  std::vector<int32_t> a_next, b_next;      // each side's tokens from `index` (a few)
  std::string a_text, b_text;               // their streamed text
};

// Where two detokenised texts first differ (at a UTF-8 character boundary).
struct TextDivergence {
  size_t offset = 0;  // byte offset
  std::string before, a_after, b_after;
};

struct Comparison {
  bool holds = true;
  std::string reason;  // one line saying why it does not hold; empty when it holds
  std::optional<TokenDivergence> tokens;  // computed under every contract
  std::optional<TextDivergence> text;     // computed under every contract
  // Largest |logprob difference| over the positions where both have the same token so far.
  double max_logprob_delta = 0;
  std::optional<size_t> logprob_index;  // logprob contract: first position over epsilon
};

// Compares `b` against the reference `a`; `a_text` and `b_text` are their detokenised texts
// (see Detokenizer). Different prompt token counts break every contract: the two did not run
// the same prompt.
Comparison compare(const Contract& contract, const Generation& a, const Generation& b,
                   const std::string& a_text, const std::string& b_text);

nlohmann::json to_json(const Comparison& c);

}  // namespace hearth::proof
