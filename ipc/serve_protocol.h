// The protocol of a batching worker (`hearth-worker --serve SOCKET`): requests submitted by
// many clients (the gateway, tools) into one engine, their tokens streamed back as events. It
// rides on protocol.h's framing, hello, ids and error replies, and adds:
//
//   submit {"request": {"id": ID, "prompt": TEXT | "prompt_tokens": [..], settings...}}
//       -> {"accepted": ID} once the engine has queued it, or an error reply: bad_request naming
//          the field, busy when the queue is full, shutting_down.
//       Then event frames, pushed (they answer no request, so they carry no "id"/"ok"):
//          {"event": {"id": ID, "token": N, "text": "...", "logprob": X, ...}}   one per token
//          {"event": {"id": ID, "done": true, "stop": "eos|length|stop|cancelled|error", ...}}
//       The event objects are the worker's JSONL events (worker/engine/event_json.h), so a
//       stream read from a socket and one read from `--format jsonl` parse alike.
//   cancel {"request": ID} -> {} ; the request's last event then says "stop": "cancelled".
//       Cancelling a finished or unknown request is not an error (it may have just finished).
//   engine_stats -> {"running", "waiting", "kv_blocks_used", "kv_blocks_total", ...}
//
// A client that disconnects cancels every request it submitted. Request ids are chosen by the
// client and must be unique among its own requests in flight.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

namespace hearth::ipc {

namespace op {
inline constexpr std::string_view kSubmit = "submit";
inline constexpr std::string_view kCancel = "cancel";
inline constexpr std::string_view kEngineStats = "engine_stats";
}  // namespace op

// A pushed frame: {"event": {...}}. Replies always carry "id"; events never do.
inline bool is_event_frame(const nlohmann::json& body) {
  return body.is_object() && body.contains("event") && !body.contains("id");
}

inline nlohmann::json make_event_frame(nlohmann::json event) {
  return nlohmann::json{{"event", std::move(event)}};
}

}  // namespace hearth::ipc
