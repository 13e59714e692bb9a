#include "proof/contract.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace hearth::proof {

using json = nlohmann::json;

namespace {

constexpr size_t kContextTokens = 8;  // tokens shown after a divergence
constexpr size_t kContextBytes = 64;  // bytes of text shown around one

bool is_continuation(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

// Moves a byte offset back to the start of the UTF-8 character it falls in.
size_t char_start(const std::string& s, size_t at) {
  while (at > 0 && at < s.size() && is_continuation(s[at])) --at;
  return at;
}

// The last ~kContextBytes of s[0, end), starting on a character boundary.
std::string tail_before(const std::string& s, size_t end) {
  const size_t from = char_start(s, end > kContextBytes ? end - kContextBytes : 0);
  return s.substr(from, end - from);
}

// About kContextBytes of s from `from`, ending on a character boundary.
std::string head_from(const std::string& s, size_t from) {
  if (from >= s.size()) return {};
  size_t end = std::min(s.size(), from + kContextBytes);
  if (end < s.size()) end = char_start(s, end);
  return s.substr(from, end - from);
}

double logprob_delta(double a, double b) {
  if (std::isnan(a) && std::isnan(b)) return 0;  // both unknown: nothing to compare
  if (std::isnan(a) || std::isnan(b)) return INFINITY;
  return std::fabs(a - b);
}

std::string token_name(std::optional<int32_t> t) {
  return t ? std::to_string(*t) : std::string("end of output");
}

std::optional<TokenDivergence> token_divergence(const Generation& a, const Generation& b) {
  const size_t shared = std::min(a.tokens.size(), b.tokens.size());
  size_t i = 0;
  while (i < shared && a.tokens[i] == b.tokens[i]) ++i;
  if (i == shared && a.tokens.size() == b.tokens.size()) return std::nullopt;

  TokenDivergence d;
  d.index = i;
  if (i < a.tokens.size()) d.a_token = a.tokens[i];
  if (i < b.tokens.size()) d.b_token = b.tokens[i];
  std::string prefix;
  for (size_t k = 0; k < i; ++k) prefix += a.pieces[k];
  d.before = tail_before(prefix, prefix.size());
  for (size_t k = i; k < std::min(a.tokens.size(), i + kContextTokens); ++k) {
    d.a_next.push_back(a.tokens[k]);
    d.a_text += a.pieces[k];
  }
  for (size_t k = i; k < std::min(b.tokens.size(), i + kContextTokens); ++k) {
    d.b_next.push_back(b.tokens[k]);
    d.b_text += b.pieces[k];
  }
  return d;
}

std::optional<TextDivergence> text_divergence(const std::string& a, const std::string& b) {
  if (a == b) return std::nullopt;
  const auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  (void)ib;
  TextDivergence d;
  // Both strings agree up to the mismatch, so a's character boundary is b's too.
  d.offset = char_start(a.size() > b.size() ? a : b, size_t(ia - a.begin()));
  d.before = tail_before(a, d.offset);
  d.a_after = head_from(a, d.offset);
  d.b_after = head_from(b, d.offset);
  return d;
}

std::string describe_tokens(const TokenDivergence& d) {
  return "tokens differ at index " + std::to_string(d.index) + " (" + token_name(d.a_token) +
         " vs " + token_name(d.b_token) + ")";
}

std::string format_double(double v) {
  std::ostringstream s;
  s.precision(3);
  s << v;
  return s.str();
}

}  // namespace

Contract Contract::parse(std::string_view text) {
  if (text == "exact") return {Kind::Exact, 0};
  if (text == "text") return {Kind::Text, 0};
  constexpr std::string_view prefix = "logprob:";
  if (text.starts_with(prefix)) {
    const std::string_view eps = text.substr(prefix.size());
    double value = 0;
    const auto [end, ec] = std::from_chars(eps.data(), eps.data() + eps.size(), value);
    if (ec == std::errc() && end == eps.data() + eps.size() && std::isfinite(value) && value >= 0)
      return {Kind::Logprob, value};
    throw std::runtime_error("contract '" + std::string(text) +
                             "': EPS must be a finite number >= 0, e.g. logprob:1e-4");
  }
  throw std::runtime_error("unknown contract '" + std::string(text) +
                           "' (known: exact, text, logprob:EPS)");
}

std::string Contract::name() const {
  switch (kind) {
    case Kind::Exact:
      return "exact";
    case Kind::Text:
      return "text";
    case Kind::Logprob: {
      // The shortest text that reads back as the same double ("logprob:1e-04", "logprob:0.1").
      char buf[64];
      const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), epsilon);
      return "logprob:" + (ec == std::errc() ? std::string(buf, end) : std::to_string(epsilon));
    }
  }
  return "?";
}

Comparison compare(const Contract& contract, const Generation& a, const Generation& b,
                   const std::string& a_text, const std::string& b_text) {
  Comparison c;
  c.tokens = token_divergence(a, b);
  c.text = text_divergence(a_text, b_text);
  const size_t same = c.tokens ? c.tokens->index : a.tokens.size();
  for (size_t i = 0; i < same; ++i) {
    const double delta = logprob_delta(a.logprobs[i], b.logprobs[i]);
    c.max_logprob_delta = std::max(c.max_logprob_delta, delta);
    if (!c.logprob_index && delta > contract.epsilon) c.logprob_index = i;
  }

  switch (contract.kind) {
    case Contract::Kind::Exact:
      if (c.tokens) c.reason = describe_tokens(*c.tokens);
      break;
    case Contract::Kind::Text:
      if (c.text) c.reason = "texts differ at byte " + std::to_string(c.text->offset);
      break;
    case Contract::Kind::Logprob:
      if (c.logprob_index) {
        const size_t i = *c.logprob_index;
        c.reason = "logprob differs by " +
                   format_double(logprob_delta(a.logprobs[i], b.logprobs[i])) + " > " +
                   format_double(contract.epsilon) + " at index " + std::to_string(i);
      } else if (c.tokens) {
        c.reason = describe_tokens(*c.tokens);
      }
      break;
  }
  if (contract.kind != Contract::Kind::Logprob) c.logprob_index.reset();
  if (a.prompt_tokens != b.prompt_tokens)
    c.reason = "prompt token counts differ (" + std::to_string(a.prompt_tokens) + " vs " +
               std::to_string(b.prompt_tokens) + ")" + (c.reason.empty() ? "" : "; " + c.reason);
  c.holds = c.reason.empty();
  return c;
}

json to_json(const Comparison& c) {
  json j{{"holds", c.holds}, {"max_logprob_delta", c.max_logprob_delta}};
  if (!c.reason.empty()) j["reason"] = c.reason;
  if (c.tokens) {
    const TokenDivergence& d = *c.tokens;
    j["first_divergence"] = {{"index", d.index},
                             {"a_token", d.a_token ? json(*d.a_token) : json()},
                             {"b_token", d.b_token ? json(*d.b_token) : json()},
                             {"text_before", d.before},
                             {"a_tokens", d.a_next},
                             {"b_tokens", d.b_next},
                             {"a_text", d.a_text},
                             {"b_text", d.b_text}};
  } else {
    j["first_divergence"] = nullptr;
  }
  if (c.text)
    j["text_divergence"] = {{"offset", c.text->offset},
                            {"text_before", c.text->before},
                            {"a_text", c.text->a_after},
                            {"b_text", c.text->b_after}};
  if (c.logprob_index) j["logprob_index"] = *c.logprob_index;
  return j;
}

}  // namespace hearth::proof
