// hearth-worker --serve SOCKET: a long-lived worker that takes requests from many clients over
// the hearth protocol (ipc frames, served by the broker) and runs them all in one engine.
//
//   submit {"request": {"id", "prompt" | "prompt_tokens", settings...}} -> {"request_id"}
//          a refused request answers ok:false, bad_request, naming the request and field. The
//          request is read (its prompt tokenized) off the loop thread: a long prompt stalls no
//          other client. Ids are at most ipc::kMaxRequestIdBytes (ipc/serve_limits.h).
//   events {} -> {"events": [...], "more": bool, "stats": {...}}: this client's events since its
//          last call (and the engine's counters as stats gives them, for the gateway's /metrics),
//          in order, each as event_json.h writes it, at most ipc::kMaxEventsReplyBytes of them
//          ("more": the rest are queued; call again). While the client has requests in flight
//          and nothing is ready, the reply waits (a long poll). Nothing in flight: an empty
//          list at once. A client whose undelivered events pass ServeOptions::
//          max_queued_event_bytes has its requests held (not scheduled, their KV kept, their
//          tokens unchanged) until it reads: a slow reader slows only itself, nothing is dropped.
//   cancel {"request_id"} -> {"cancelled": true|false}
//   stats  {} -> the engine's counters ("aborted": requests cancelled, by cancel or a
//          disconnect; "held": requests held for a slow reader; "iteration_tokens": every
//          step's tokens, counted per bucket of worker/iteration_tokens.h)
//   shutdown: only the worker's parent process (its supervisor) may send it; SIGTERM stays.
// Each op takes exactly its fields: another is a bad_request naming it (serve_protocol.h). The
// hello reply states the request frame limit, "max_request_bytes" (ipc::max_submit_bytes), and
// "max_sequence_tokens", the most prompt + max_tokens a request may ask for.
//
// ("id" is the protocol envelope's own request number, hence "request_id" outside events.)
// Request ids belong to the client that chose them: two clients may both say "r1". A client
// that disconnects cancels its requests. The engine runs on a thread of its own; the broker's
// loop thread only queues commands for it and hands its events back, so a long forward pass
// never stalls a client. The worker exits after `idle_exit` with no request in flight, or on
// SIGTERM/SIGINT: every request in flight then ends with an error event ("the worker is
// shutting down") that reaches clients waiting for events before their connections close.
//
// The parts, each in a file of its own: the engine loop (serve_loop.h, no sockets), the
// per-client event queues (client_event_queues.h), the protocol handler (serve_handler.h), the
// stop signals (stop_signals.h); serve() wires them to the broker.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "ipc/serve_limits.h"

#include "worker/engine/engine.h"
#include "worker/stop_signals.h"

namespace hearth {

class Tokenizer;

struct ServeOptions {
  std::string socket_path;
  std::chrono::milliseconds idle_exit{0};  // 0: never
  bool quiet = false;                      // no broker log lines on stderr
  // The request frame limit: ipc::max_submit_bytes for the model, so any prompt up to the
  // context length fits.
  std::size_t max_request_bytes = ipc::kSubmitOverheadBytes;
  // Per client: undelivered events beyond this hold its requests until it reads.
  std::size_t max_queued_event_bytes = ipc::kDefaultMaxQueuedEventBytes;
  // The backend's context length (0: unknown). With the KV pool's size it gives the hello's
  // "max_sequence_tokens": the most prompt + max_tokens one request may ask for, from which
  // the gateway derives a request's default max_tokens.
  int context_length = 0;
};

// Serves until idle, a signal, or an admin shutdown; returns then. `defaults` are the
// profile's request settings, which each request's own override. Throws if the socket cannot
// be bound (e.g. another server holds it).
void serve(Engine& engine, const ServeOptions& options, const RequestSettings& defaults,
           const Tokenizer* tokenizer);

}  // namespace hearth
