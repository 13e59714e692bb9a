#include "worker/output_sink.h"

#include <stdexcept>

#include "worker/engine/event_json.h"

namespace hearth {

namespace {
void put(std::FILE* out, const std::string& s) {
  if (!s.empty() && std::fwrite(s.data(), 1, s.size(), out) != s.size())
    throw std::runtime_error("cannot write the output (disk full or closed pipe?)");
  if (std::fflush(out) != 0) throw std::runtime_error("cannot flush the output");
}
}  // namespace

void TextSink::write(const RequestOutput& output) {
  std::string text;
  for (const TokenOutput& t : output.tokens) text += t.visible;
  if (output.finish) text += output.finish->final_visible + "\n";
  put(out_, text);
}

void JsonlSink::write(const RequestOutput& output) {
  std::string lines;
  for (const TokenOutput& t : output.tokens) lines += event_line(token_event_json(output.id, t));
  // Marked as the first token is about to be written, before a final event in the same write
  // (max_tokens 1) reads the timeline.
  if (timeline_ && !output.tokens.empty()) timeline_->mark("first_token_ms");
  if (output.finish) {
    nlohmann::json done = done_event_json(output.id, *output.finish, extra_timings_);
    if (timeline_) done["timeline"] = timeline_->json();
    lines += event_line(done);
  }
  put(out_, lines);
}

}  // namespace hearth
