#include "worker/output_sink.h"

#include <stdexcept>

namespace hearth {

using json = nlohmann::json;

namespace {
void put(std::FILE* out, const std::string& s) {
  if (!s.empty() && std::fwrite(s.data(), 1, s.size(), out) != s.size())
    throw std::runtime_error("cannot write the output (disk full or closed pipe?)");
  if (std::fflush(out) != 0) throw std::runtime_error("cannot flush the output");
}
}  // namespace

void TextSink::on_token(const TokenEvent& event) {
  put(out_, event.visible);
}

void TextSink::on_done(const GenerationStats& stats) {
  put(out_, stats.final_visible + "\n");
}

void JsonlSink::write(const json& line) {
  // Invalid UTF-8 cannot reach here (the stream decoder only emits whole characters), but
  // replacing rather than throwing keeps a stray byte from killing a long run.
  put(out_, line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
}

void JsonlSink::on_token(const TokenEvent& event) {
  write(json{{"token", event.token}, {"text", event.text}, {"logprob", event.logprob}});
}

void JsonlSink::on_done(const GenerationStats& s) {
  json timings = extra_timings_.is_object() ? extra_timings_ : json::object();
  timings["prefill_ms"] = s.prefill_ms;
  timings["ttft_ms"] = s.time_to_first_token_ms;
  timings["decode_ms"] = s.decode_ms;
  if (s.generated_tokens > 1 && s.decode_ms > 0)
    timings["decode_tokens_per_s"] = (s.generated_tokens - 1) * 1000.0 / s.decode_ms;
  write(json{{"done", true},
             {"stop", stop_reason_name(s.stop)},
             {"prompt_tokens", s.prompt_tokens},
             {"generated_tokens", s.generated_tokens},
             {"timings", timings}});
}

}  // namespace hearth
