#include "worker/engine/event_json.h"

#include <cmath>
#include <stdexcept>

namespace hearth {

using json = nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& why) {
  throw std::runtime_error(why);
}

// A logprob as JSON: null where it is not finite (JSON has no NaN or infinity).
json logprob_json(float logprob) {
  return std::isfinite(logprob) ? json(logprob) : json();
}

double read_logprob(const json& event, const char* key) {
  if (!event.contains(key) || event[key].is_null()) return std::nan("");
  if (!event[key].is_number()) bad(std::string("\"") + key + "\" must be a number");
  return event[key].get<double>();
}

int64_t read_count(const json& event, const char* key) {
  if (!event.contains(key)) return 0;
  if (!event[key].is_number_integer()) bad(std::string("\"") + key + "\" must be an integer");
  return event[key].get<int64_t>();
}

}  // namespace

json token_event_json(const std::string& id, const TokenOutput& t) {
  json e = json::object();
  if (!id.empty()) e["id"] = id;
  e["token"] = t.token;
  e["text"] = t.text;
  // Stop strings hold text back: what a client may show now, when that differs.
  if (t.visible != t.text) e["visible"] = t.visible;
  e["logprob"] = logprob_json(t.logprob);
  if (!t.top_logprobs.empty()) {
    json top = json::array();
    for (const TokenLogprob& c : t.top_logprobs)
      top.push_back({{"token", c.token}, {"logprob", logprob_json(c.logprob)}});
    e["top_logprobs"] = std::move(top);
  }
  return e;
}

json done_event_json(const std::string& id, const FinishOutput& f, const json& extra_timings) {
  json timings = extra_timings.is_object() ? extra_timings : json::object();
  timings["queue_ms"] = f.timings.queue_ms;
  timings["prefill_ms"] = f.timings.prefill_ms;
  timings["ttft_ms"] = f.timings.ttft_ms;
  timings["decode_ms"] = f.timings.decode_ms;
  if (f.generated_tokens > 1 && f.timings.decode_ms > 0)
    timings["decode_tokens_per_s"] = (f.generated_tokens - 1) * 1000.0 / f.timings.decode_ms;
  json e = json::object();
  if (!id.empty()) e["id"] = id;
  e["done"] = true;
  e["stop"] = finish_reason_name(f.reason);
  if (f.reason == FinishReason::Error) e["error"] = f.error;
  e["prompt_tokens"] = f.prompt_tokens;
  e["generated_tokens"] = f.generated_tokens;
  e["cached_tokens"] = f.cached_tokens;
  if (!f.final_visible.empty()) e["visible"] = f.final_visible;  // held back until the end
  e["timings"] = std::move(timings);
  return e;
}

std::string event_line(const json& event) {
  // Invalid UTF-8 cannot come from the stream decoder (it emits whole characters only), but
  // replacing rather than throwing keeps a stray byte from killing a long run.
  return event.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

Event event_from_json(const json& event) {
  if (!event.is_object()) bad("not a JSON object");
  Event e;
  if (event.contains("id")) {
    if (!event["id"].is_string()) bad("\"id\" must be a string");
    e.id = event["id"].get<std::string>();
  }
  if (event.contains("done")) {
    if (event["done"] != true) bad("\"done\" must be true");
    if (!event.contains("stop") || !event["stop"].is_string()) bad("summary without \"stop\"");
    if (!event.contains("generated_tokens") || !event["generated_tokens"].is_number_integer())
      bad("summary without \"generated_tokens\"");
    e.done = true;
    DoneEvent& d = e.summary;
    d.stop = event["stop"].get<std::string>();
    d.generated_tokens = event["generated_tokens"].get<int64_t>();
    d.prompt_tokens = read_count(event, "prompt_tokens");
    d.cached_tokens = read_count(event, "cached_tokens");
    if (event.contains("error")) {
      if (!event["error"].is_string()) bad("\"error\" must be a string");
      d.error = event["error"].get<std::string>();
    }
    if (event.contains("timings") && event["timings"].is_object()) d.timings = event["timings"];
    return e;
  }
  if (!event.contains("token") || !event["token"].is_number_integer())
    bad("token event without an integer \"token\"");
  TokenEvent& t = e.token;
  t.token = event["token"].get<int32_t>();
  t.logprob = read_logprob(event, "logprob");
  if (event.contains("text")) {
    if (!event["text"].is_string()) bad("\"text\" must be a string");
    t.text = event["text"].get<std::string>();
  }
  if (event.contains("top_logprobs")) {
    if (!event["top_logprobs"].is_array()) bad("\"top_logprobs\" must be an array");
    for (const json& c : event["top_logprobs"]) {
      if (!c.is_object() || !c.contains("token") || !c["token"].is_number_integer())
        bad("\"top_logprobs\" entries need an integer \"token\"");
      t.top_logprobs.push_back({c["token"].get<int32_t>(), float(read_logprob(c, "logprob"))});
    }
  }
  return e;
}

Event parse_event_line(std::string_view line) {
  const json event = json::parse(line, nullptr, false);
  if (event.is_discarded()) bad("not a JSON object");
  return event_from_json(event);
}

}  // namespace hearth
