#include "worker/engine_server.h"

#include <unistd.h>

#include <algorithm>

#include "broker/broker_options.h"
#include "worker/serve_handler.h"
#include "worker/serve_loop.h"

namespace hearth {

namespace {

// How long a shutting-down worker waits for its clients to collect their last events.
constexpr std::chrono::seconds kShutdownGrace{5};

// The most prompt + max_tokens the engine takes: the context, and the whole KV pool (the last
// token is sampled, never stored, hence the + 1), as Engine::submit checks them.
int64_t max_sequence_tokens(const ServeOptions& options, const EngineStats& stats) {
  const int64_t pool = int64_t(stats.kv_blocks_total) * stats.kv_block_size + 1;
  return options.context_length > 0 ? std::min<int64_t>(options.context_length, pool) : pool;
}

broker::BrokerOptions broker_options(const ServeOptions& options, std::size_t reply_bytes,
                                     int64_t max_sequence_tokens) {
  broker::BrokerOptions b;
  b.socket_path = options.socket_path;
  b.server_name = "hearth-worker";
  b.handle_signals = false;  // ours: in-flight requests must end with an error event first
  b.max_request_bytes = options.max_request_bytes;
  b.hello_fields = {{"max_request_bytes", options.max_request_bytes},
                    {"max_request_id_bytes", ipc::kMaxRequestIdBytes},
                    {"max_events_reply_bytes", reply_bytes},
                    {"max_sequence_tokens", max_sequence_tokens}};
  // Any client of the worker's uid may submit, but only the process that started the worker
  // (its supervisor: the gateway) may stop it with a request.
  b.admin_pid = ::getppid();
  if (options.quiet) b.log = nullptr;
  return b;
}

}  // namespace

void serve(Engine& engine, const ServeOptions& options, const RequestSettings& defaults,
           const Tokenizer* tokenizer) {
  block_stop_signals();  // for the threads started here; the caller's should have it already
  ServeHandler::Options handler_options;
  handler_options.max_queued_event_bytes = options.max_queued_event_bytes;
  handler_options.max_events_reply_bytes =
      std::min(ipc::kMaxEventsReplyBytes, options.max_queued_event_bytes);
  handler_options.idle_exit = options.idle_exit;
  handler_options.quiet = options.quiet;
  ServeHandler handler(broker_options(options, handler_options.max_events_reply_bytes,
                                      max_sequence_tokens(options, engine.stats())),
                       handler_options);
  // Declared after the handler, its sink, so its threads end first.
  ServeLoop loop(engine, defaults, tokenizer, {options.idle_exit, kShutdownGrace}, handler);
  StopSignalWatcher signals([&](const std::string& name) { loop.stop(name); });
  handler.run(loop);
  loop.finish();  // the broker has stopped: nobody is left to answer
}

}  // namespace hearth
