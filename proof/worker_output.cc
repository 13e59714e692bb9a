#include "proof/worker_output.h"

#include <map>
#include <stdexcept>

#include "worker/engine/event_json.h"

namespace hearth::proof {

namespace {

[[noreturn]] void bad(size_t line, const std::string& why) {
  throw std::runtime_error("worker output line " + std::to_string(line) + ": " + why);
}

// Calls `on_event(line_number, event)` for every non-empty line.
template <typename F>
void for_each_event(std::string_view jsonl, F&& on_event) {
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
    Event event;
    try {
      event = parse_event_line(line);
    } catch (const std::runtime_error& e) {
      bad(line_no, e.what());
    }
    on_event(line_no, event);
  }
}

// Adds one event to a generation; returns true when it was the summary.
bool add(Generation& g, const Event& event, size_t line_no) {
  if (!event.done) {
    g.tokens.push_back(event.token.token);
    g.logprobs.push_back(event.token.logprob);
    g.pieces.push_back(event.token.text);
    return false;
  }
  const DoneEvent& d = event.summary;
  g.stop = d.stop;
  g.error = d.error;
  g.prompt_tokens = int(d.prompt_tokens);
  g.cached_tokens = int(d.cached_tokens);
  g.timings = d.timings;
  if (d.generated_tokens != int64_t(g.tokens.size()))
    bad(line_no, "summary says " + std::to_string(d.generated_tokens) + " tokens, the stream has " +
                     std::to_string(g.tokens.size()));
  return true;
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
  for_each_event(jsonl, [&](size_t line_no, const Event& event) {
    if (done) bad(line_no, "output after the final summary");
    done = add(g, event, line_no);
  });
  if (!done)
    throw std::runtime_error("worker output has no final summary after " +
                             std::to_string(g.tokens.size()) +
                             " tokens (the worker stopped before finishing)");
  return g;
}

std::vector<std::pair<std::string, Generation>> parse_batched_worker_output(
    std::string_view jsonl) {
  std::map<std::string, Generation> open;
  std::map<std::string, bool> finished;
  std::vector<std::pair<std::string, Generation>> out;
  for_each_event(jsonl, [&](size_t line_no, const Event& event) {
    if (event.id.empty()) bad(line_no, "an event without an \"id\" in a batched stream");
    if (finished.contains(event.id))
      bad(line_no, "output for request '" + event.id + "' after its final summary");
    if (add(open[event.id], event, line_no)) {
      finished[event.id] = true;
      out.emplace_back(event.id, std::move(open[event.id]));
      open.erase(event.id);
    }
  });
  if (!open.empty())
    throw std::runtime_error("worker output has no final summary for request '" +
                             open.begin()->first + "' (the worker stopped before finishing)");
  return out;
}

BatchedStream split_batched_worker_output(std::string_view jsonl) {
  BatchedStream out;
  size_t line_no = 0;
  while (!jsonl.empty() && out.error.empty()) {
    ++line_no;
    const std::string where = "worker output line " + std::to_string(line_no) + ": ";
    const size_t nl = jsonl.find('\n');
    if (nl == std::string_view::npos) {
      out.error = where + "cut off (the worker stopped in the middle of it)";
      break;
    }
    const std::string_view line = jsonl.substr(0, nl + 1);
    jsonl.remove_prefix(nl + 1);
    if (line.size() == 1) continue;
    try {
      const Event event = parse_event_line(line.substr(0, line.size() - 1));
      if (event.id.empty())
        out.error = where + "an event without an \"id\" in a batched stream";
      else if (out.finished.contains(event.id))
        out.error = where + "output for request '" + event.id + "' after its final summary";
      else {
        out.events[event.id] += line;
        if (event.done) out.finished.insert(event.id);
      }
    } catch (const std::runtime_error& e) {
      out.error = where + e.what();
    }
  }
  return out;
}

}  // namespace hearth::proof
