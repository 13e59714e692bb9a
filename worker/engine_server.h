// hearth-worker --serve SOCKET: a long-lived worker that takes requests from many clients over
// the hearth protocol (ipc frames, served by the broker) and runs them all in one engine.
//
//   submit {"request": {"id", "prompt" | "prompt_tokens", settings...}} -> {"request_id"}
//          a refused request answers ok:false, bad_request, naming the request and field
//   events {} -> {"events": [...]}: this client's events since its last call, in order, each
//          as event_json.h writes it; while the client has requests in flight and nothing is
//          ready, the reply waits (a long poll). Nothing in flight: an empty list at once.
//   cancel {"request_id"} -> {"cancelled": true|false}
//   stats  {} -> the engine's counters
//
// ("id" is the protocol envelope's own request number, hence "request_id" outside events.)
// Request ids belong to the client that chose them: two clients may both say "r1". A client
// that disconnects cancels its requests. The engine runs on a thread of its own; the broker's
// loop thread only queues commands for it and hands its events back, so a long forward pass
// never stalls a client. The worker exits after `idle_exit` with no request in flight, or on
// SIGTERM/SIGINT: every request in flight then ends with an error event ("the worker is
// shutting down") that reaches clients waiting for events before their connections close.
#pragma once

#include <chrono>
#include <string>

#include "worker/engine/engine.h"

namespace hearth {

class Tokenizer;

struct ServeOptions {
  std::string socket_path;
  std::chrono::milliseconds idle_exit{0};  // 0: never
  bool quiet = false;                      // no broker log lines on stderr
};

// Blocks SIGTERM and SIGINT in the calling thread and the threads it starts from then on, so
// serve() can wait for them itself. Call it first thing in main, before any thread exists.
void block_stop_signals();

// Serves until idle, a signal, or an admin shutdown; returns then. `defaults` are the
// profile's request settings, which each request's own override. Throws if the socket cannot
// be bound (e.g. another server holds it).
void serve(Engine& engine, const ServeOptions& options, const RequestSettings& defaults,
           const Tokenizer* tokenizer);

}  // namespace hearth
