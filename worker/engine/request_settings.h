// What one request asks for: how to sample, how long to go on, when to stop, what to report.
// Requests with different settings share a worker and a forward pass.
//
// The ranges of these settings live here and only here: the engine checks every request it is
// given (check_settings), and whatever reads settings from outside (profiles and request JSON,
// the gateway's OpenAI fields) stores each value through the checked_* reader of its field, so
// every way in refuses the same values with the same words.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/engine/sampler.h"

namespace hearth {

// The ranges of the integer settings that are also command-line flags, so both say the same.
inline constexpr int kMaxTokensLimit = 1 << 24;  // max_tokens
inline constexpr int kMaxTopK = 1 << 30;         // top_k
inline constexpr int kMaxLogitBias = 300;        // logit_bias entries (OpenAI's limit)

// Structured output: what the generated text must be (worker/engine/structured/). The engine
// masks every step's logits so only tokens that keep the text inside the language can be
// sampled, and end-of-sequence only where the text is complete.
enum class OutputFormat {
  Text,        // no constraint
  JsonObject,  // any JSON object (response_format json_object)
  JsonSchema,  // `spec` is a JSON Schema's text (json_schema, guided_json)
  Regex,       // `spec` is a regular expression the whole output matches (guided_regex)
};

struct StructuredOutput {
  OutputFormat format = OutputFormat::Text;
  std::string spec;
  // Literal bytes the output starts and ends with around the language (guided_prefix,
  // guided_suffix): a forced tool call's markup around its JSON (gateway/tool_calls/).
  std::string prefix = {}, suffix = {};
  bool operator==(const StructuredOutput&) const = default;
};

// A schema or regex text longer than this is refused (it is compiled on the engine's thread).
inline constexpr size_t kMaxStructuredSpecBytes = 64 * 1024;

struct RequestSettings {
  SamplingParams sampling;
  int max_tokens = 256;
  std::vector<std::string> stop;  // stop strings; the text is cut before the first one
  bool ignore_eos = false;
  int logprobs = 0;        // also report the N most likely tokens of each step (0: only the
                           // chosen token's logprob, which every token event carries)
  std::string cache_salt;  // prefix caching: requests share cached KV only with the same salt
  StructuredOutput structured;
};

// A setting outside its range. field() is the setting's name as a profile key ("top_p");
// what() is "field: reason", so a caller that names the setting its own way (the gateway's
// OpenAI names, a profile's file) says reason() after its own name.
class SettingError : public std::runtime_error {
 public:
  SettingError(std::string field, const std::string& reason);
  const std::string& field() const { return field_; }
  const std::string& reason() const { return reason_; }

 private:
  std::string field_, reason_;
};

// One value checked against its field's range and returned as the field's type. Values come in
// wide (double, int64_t), so one too large for the field is refused, never converted; NaN is
// refused everywhere. Each throws SettingError naming the field.
float checked_temperature(double v);                            // [0, 100]
int checked_top_k(int64_t v);                                   // [0, kMaxTopK], 0: off
float checked_top_p(double v);                                  // (0, 1]
float checked_min_p(double v);                                  // [0, 1]
float checked_repetition_penalty(double v);                     // [1e-3, 100]
float checked_frequency_penalty(double v);                      // [-2, 2], 0: off
float checked_presence_penalty(double v);                       // [-2, 2], 0: off
int checked_max_tokens(int64_t v);                              // [0, kMaxTokensLimit]
int checked_logprobs(int64_t v);                                // [0, kMaxTopLogprobs]
void check_stop_strings(const std::vector<std::string>& stop);  // each non-empty
// logit_bias as (token id, bias) entries: ids >= 0 and unique, each bias in [-100, 100], at
// most kMaxLogitBias entries. Returned in ascending id order, as SamplingParams holds them.
std::vector<std::pair<int32_t, float>> checked_logit_bias(
    const std::vector<std::pair<int64_t, double>>& entries);
// The ids against the model's vocabulary, which only the engine knows: each below `vocab`.
void check_logit_bias_ids(const std::vector<std::pair<int32_t, float>>& bias, int vocab);
void check_structured_output(const StructuredOutput& s);  // spec size, present iff needed

// Every field of `settings` through the checks above; throws SettingError for the first out of
// range. The engine's check of each request it takes.
void check_settings(const RequestSettings& settings);

}  // namespace hearth
