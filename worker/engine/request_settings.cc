#include "worker/engine/request_settings.h"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <charconv>
#include <cmath>

#include "worker/engine/logprobs.h"

namespace hearth {

SettingError::SettingError(std::string field, const std::string& reason)
    : std::runtime_error(field + ": " + reason), field_(std::move(field)), reason_(reason) {}

namespace {

// The value as written: a float field's value prints as the float (0.1f as 0.1, not as
// 0.10000000149011612), so a check of stored settings says what the caller set.
std::string shortest(double v) {
  char buf[32];
  if (std::fabs(v) <= FLT_MAX && double(float(v)) == v)
    return std::string(buf, std::to_chars(buf, buf + sizeof buf, float(v)).ptr);
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

double in_range(const char* field, double v, double lo, double hi) {
  if (!(v >= lo && v <= hi))  // NaN fails too
    throw SettingError(
        field, "must be in [" + shortest(lo) + ", " + shortest(hi) + "], got " + shortest(v));
  return v;
}

int64_t in_range(const char* field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    throw SettingError(field, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                  "], got " + std::to_string(v));
  return v;
}

}  // namespace

float checked_temperature(double v) {
  return float(in_range("temperature", v, 0.0, 100.0));
}

int checked_top_k(int64_t v) {
  return int(in_range("top_k", v, 0, kMaxTopK));
}

float checked_top_p(double v) {
  // 0 would keep no token at all, and so would a value that is 0 as a float.
  const float p = float(in_range("top_p", v, 0.0, 1.0));
  if (p <= 0.0f) throw SettingError("top_p", "must be greater than 0");
  return p;
}

float checked_min_p(double v) {
  return float(in_range("min_p", v, 0.0, 1.0));
}

float checked_repetition_penalty(double v) {
  return float(in_range("repetition_penalty", v, 1e-3, 100.0));
}

float checked_frequency_penalty(double v) {
  return float(in_range("frequency_penalty", v, -2.0, 2.0));
}

float checked_presence_penalty(double v) {
  return float(in_range("presence_penalty", v, -2.0, 2.0));
}

std::vector<std::pair<int32_t, float>> checked_logit_bias(
    const std::vector<std::pair<int64_t, double>>& entries) {
  if (entries.size() > size_t(kMaxLogitBias))
    throw SettingError("logit_bias", "at most " + std::to_string(kMaxLogitBias) + " entries, got " +
                                         std::to_string(entries.size()));
  std::vector<std::pair<int32_t, float>> out;
  out.reserve(entries.size());
  for (const auto& [id, bias] : entries) {
    const int64_t t = in_range("logit_bias", id, 0, INT32_MAX);
    out.emplace_back(int32_t(t), float(in_range("logit_bias", bias, -100.0, 100.0)));
  }
  std::sort(out.begin(), out.end());
  for (size_t i = 1; i < out.size(); ++i)
    if (out[i].first == out[i - 1].first)
      throw SettingError("logit_bias", "token " + std::to_string(out[i].first) + " is given twice");
  return out;
}

void check_logit_bias_ids(const std::vector<std::pair<int32_t, float>>& bias, int vocab) {
  for (const auto& [id, b] : bias)
    if (id < 0 || id >= vocab)
      throw SettingError("logit_bias", "token " + std::to_string(id) +
                                           " is outside the vocabulary (" + std::to_string(vocab) +
                                           " tokens)");
}

int checked_max_tokens(int64_t v) {
  return int(in_range("max_tokens", v, 0, kMaxTokensLimit));
}

int checked_logprobs(int64_t v) {
  return int(in_range("logprobs", v, 0, kMaxTopLogprobs));
}

void check_stop_strings(const std::vector<std::string>& stop) {
  for (const std::string& s : stop)
    if (s.empty()) throw SettingError("stop", "stop strings must be non-empty");
}

void check_structured_output(const StructuredOutput& s) {
  const char* field = s.format == OutputFormat::Regex ? "guided_regex" : "guided_json";
  if (s.spec.size() > kMaxStructuredSpecBytes)
    throw SettingError(field, "at most " + std::to_string(kMaxStructuredSpecBytes) +
                                  " bytes, got " + std::to_string(s.spec.size()));
  const bool needs_spec = s.format == OutputFormat::JsonSchema || s.format == OutputFormat::Regex;
  if (needs_spec && s.spec.empty()) throw SettingError(field, "must not be empty");
  if (!needs_spec && !s.spec.empty())
    throw SettingError(field, "a specification needs a JSON schema or regex format");
  if (s.format == OutputFormat::Text && !(s.prefix.empty() && s.suffix.empty()))
    throw SettingError(s.prefix.empty() ? "guided_suffix" : "guided_prefix",
                       "needs guided_json, guided_regex or guided_json_object");
  if (s.prefix.size() + s.suffix.size() > kMaxStructuredSpecBytes)
    throw SettingError("guided_prefix", "prefix and suffix together at most " +
                                            std::to_string(kMaxStructuredSpecBytes) + " bytes");
}

void check_settings(const RequestSettings& s) {
  const SamplingParams& p = s.sampling;
  checked_temperature(p.temperature);
  checked_top_k(p.top_k);
  checked_top_p(p.top_p);
  checked_min_p(p.min_p);
  checked_repetition_penalty(p.repetition_penalty);
  checked_frequency_penalty(p.frequency_penalty);
  checked_presence_penalty(p.presence_penalty);
  {
    std::vector<std::pair<int64_t, double>> bias;
    for (const auto& [id, b] : p.logit_bias) bias.emplace_back(id, b);
    if (checked_logit_bias(bias) != p.logit_bias)
      throw SettingError("logit_bias", "entries must be in ascending id order");
  }
  checked_max_tokens(s.max_tokens);
  checked_logprobs(s.logprobs);
  check_stop_strings(s.stop);
  check_structured_output(s.structured);
}

}  // namespace hearth
