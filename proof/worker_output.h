// What a hearth-worker run produced, read back from its `--format jsonl` stream (the event
// schema of worker/engine/event_json.h): per request, the tokens with their logprobs and text
// pieces, and the closing summary (stop reason, counts, timings).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace hearth::proof {

struct Generation {
  std::vector<int32_t> tokens;
  // Per-token logprob; NaN where the worker wrote null (JSON has no NaN or infinity).
  std::vector<double> logprobs;
  std::vector<std::string> pieces;  // each token's share of the streamed text
  std::string stop;                 // eos | length | stop | cancelled | error
  std::string error;                // with stop == "error"
  int prompt_tokens = 0;
  int cached_tokens = 0;
  nlohmann::json timings = nlohmann::json::object();

  // The streamed text: the pieces joined. Text a stream decoder still held at the end (an
  // incomplete character) is not in it; the contract decodes the ids instead where it can.
  std::string streamed_text() const;
};

// Parses a complete jsonl stream. Throws std::runtime_error naming the line on anything that is
// not the worker's format: a non-JSON line, a token event with missing fields, a missing or
// early summary, or a summary whose counts disagree with the events.
Generation parse_worker_output(std::string_view jsonl);

// A stream of many requests (`hearth-worker --requests`), their events interleaved: one
// Generation per request id, in the order the requests finished. Throws as above, and on an
// event without an id, events for a request after its summary, or a request left unfinished.
std::vector<std::pair<std::string, Generation>> parse_batched_worker_output(std::string_view jsonl);

// A batched stream cut into its requests' events, as far as it can be read: for a worker that
// crashed, hung or wrote garbage, the requests that finished before that are still whole.
struct BatchedStream {
  std::map<std::string, std::string> events;  // request id -> its lines, newline-terminated
  std::set<std::string> finished;             // ids whose final event was read
  std::string error;  // why reading stopped early (naming the line); empty when it read it all
};
BatchedStream split_batched_worker_output(std::string_view jsonl);

}  // namespace hearth::proof
