#include "proof/worker_output.h"

#include <cmath>
#include <stdexcept>

namespace hearth::proof {

using json = nlohmann::json;

namespace {

[[noreturn]] void bad(size_t line, const std::string& why) {
  throw std::runtime_error("worker output line " + std::to_string(line) + ": " + why);
}

}  // namespace

std::string Generation::streamed_text() const {
  std::string text;
  for (const std::string& piece : pieces) text += piece;
  return text;
}

Generation parse_worker_output(std::string_view jsonl) {
  Generation g;
  bool done = false;
  size_t line_no = 0;
  while (!jsonl.empty()) {
    const size_t nl = jsonl.find('\n');
    if (nl == std::string_view::npos)
      throw std::runtime_error("worker output ends in the middle of line " +
                               std::to_string(line_no + 1) + " (the worker stopped early)");
    const std::string_view line = jsonl.substr(0, nl);
    jsonl.remove_prefix(nl + 1);
    ++line_no;
    if (line.empty()) continue;
    if (done) bad(line_no, "output after the final summary");
    const json event = json::parse(line, nullptr, false);
    if (event.is_discarded() || !event.is_object()) bad(line_no, "not a JSON object");

    if (event.contains("done")) {
      if (event["done"] != true) bad(line_no, "\"done\" must be true");
      if (!event.contains("stop") || !event["stop"].is_string())
        bad(line_no, "summary without \"stop\"");
      if (!event.contains("generated_tokens") || !event["generated_tokens"].is_number_integer())
        bad(line_no, "summary without \"generated_tokens\"");
      g.stop = event["stop"].get<std::string>();
      g.prompt_tokens = event.value("prompt_tokens", 0);
      if (event.contains("timings") && event["timings"].is_object()) g.timings = event["timings"];
      const auto generated = event["generated_tokens"].get<int64_t>();
      if (generated != int64_t(g.tokens.size()))
        bad(line_no, "summary says " + std::to_string(generated) + " tokens, the stream has " +
                         std::to_string(g.tokens.size()));
      done = true;
      continue;
    }
    if (!event.contains("token") || !event["token"].is_number_integer())
      bad(line_no, "token event without an integer \"token\"");
    const json& lp = event.contains("logprob") ? event["logprob"] : json();
    if (!lp.is_number() && !lp.is_null()) bad(line_no, "\"logprob\" must be a number");
    const json& text = event.contains("text") ? event["text"] : json("");
    if (!text.is_string()) bad(line_no, "\"text\" must be a string");
    g.tokens.push_back(event["token"].get<int32_t>());
    g.logprobs.push_back(lp.is_number() ? lp.get<double>() : std::nan(""));
    g.pieces.push_back(text.get<std::string>());
  }
  if (!done)
    throw std::runtime_error("worker output has no final summary after " +
                             std::to_string(g.tokens.size()) +
                             " tokens (the worker stopped before finishing)");
  return g;
}

}  // namespace hearth::proof
