#include "worker/engine/generator.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>

#include "worker/tokenizer/tokenizer.h"

namespace hearth {

namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// Tracks the decoded text against the stop strings: what may be shown, and where a stop
// string first appears.
class StopMatcher {
 public:
  explicit StopMatcher(const std::vector<std::string>& stops) : stops_(stops) {}

  // Appends `piece`; returns the newly showable text. Sets matched() once a stop string appears.
  std::string append(const std::string& piece) {
    const size_t search_from = text_.size();
    text_ += piece;
    size_t cut = std::string::npos;
    for (const std::string& s : stops_) {
      const size_t from = search_from >= s.size() ? search_from - s.size() + 1 : 0;
      const size_t at = text_.find(s, from);
      if (at != std::string::npos) cut = std::min(cut, at);
    }
    if (cut != std::string::npos) {
      matched_ = true;
      return release(cut);
    }
    return release(text_.size() - held_suffix());
  }

  std::string flush() { return matched_ ? std::string() : release(text_.size()); }
  bool matched() const { return matched_; }

 private:
  // Length of the longest suffix of the text that could still grow into a stop string.
  size_t held_suffix() const {
    size_t hold = 0;
    for (const std::string& s : stops_)
      for (size_t len = std::min(s.size() - 1, text_.size()); len > hold; --len)
        if (text_.compare(text_.size() - len, len, s, 0, len) == 0) {
          hold = len;
          break;
        }
    return hold;
  }
  std::string release(size_t upto) {
    if (upto <= shown_) return {};
    std::string out = text_.substr(shown_, upto - shown_);
    shown_ = upto;
    return out;
  }

  const std::vector<std::string>& stops_;
  std::string text_;
  size_t shown_ = 0;
  bool matched_ = false;
};

}  // namespace

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::Eos:
      return "eos";
    case StopReason::Length:
      return "length";
    case StopReason::StopString:
      return "stop";
  }
  return "?";
}

GenerationStats generate(Backend& backend, const Tokenizer* tokenizer,
                         const GenerationRequest& request, TokenSink& sink) {
  const RequestSettings& settings = request.settings;
  const int context = backend.context_length();
  GenerationStats stats;
  stats.prompt_tokens = int(request.prompt.size());
  if (request.prompt.empty()) throw std::runtime_error("the prompt is empty");
  if (stats.prompt_tokens > context)
    throw std::runtime_error("the prompt has " + std::to_string(stats.prompt_tokens) +
                             " tokens, more than the context length " + std::to_string(context));

  const auto start = std::chrono::steady_clock::now();
  backend.forward(request.prompt, 0);
  stats.prefill_ms = ms_since(start);

  std::optional<StreamDecoder> decoder;
  if (tokenizer) decoder.emplace(*tokenizer, /*skip_special_tokens=*/true);
  StopMatcher matcher(settings.stop);
  std::vector<int32_t> seen = request.prompt;
  int pos = stats.prompt_tokens;
  const auto decode_start = std::chrono::steady_clock::now();

  for (int step = 0; step < settings.max_tokens; ++step) {
    const SampledToken s = backend.sample(settings.sampling, seen, uint64_t(step));
    if (step == 0) stats.time_to_first_token_ms = ms_since(start);
    seen.push_back(s.token);
    ++stats.generated_tokens;

    TokenEvent event{s.token, s.logprob, {}, {}};
    if (decoder) event.text = decoder->push(s.token);
    event.visible = matcher.append(event.text);
    const bool eos =
        !settings.ignore_eos &&
        std::find(request.eos_ids.begin(), request.eos_ids.end(), s.token) != request.eos_ids.end();
    sink.on_token(event);

    if (eos) {
      stats.stop = StopReason::Eos;
      break;
    }
    if (matcher.matched()) {
      stats.stop = StopReason::StopString;
      break;
    }
    if (step + 1 == settings.max_tokens || pos == context) break;  // length
    backend.forward(std::span<const int32_t>(&s.token, 1), pos++);
  }
  if (decoder && !matcher.matched()) stats.final_visible = matcher.append(decoder->finish());
  stats.final_visible += matcher.flush();
  stats.decode_ms = ms_since(decode_start);
  sink.on_done(stats);
  return stats;
}

}  // namespace hearth
