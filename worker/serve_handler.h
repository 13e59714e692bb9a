// A serving worker's protocol handler (engine_server.h): the broker's requests become calls on
// the serve loop (submit, cancel, a client gone) and on the clients' event queues (events), and
// the loop's answers and outputs come back to the broker's loop thread. It owns the broker, and
// shuts it down when the worker is idle, or once clients have their last events after stop.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

#include "broker/broker.h"
#include "worker/client_event_queues.h"
#include "worker/serve_loop.h"

namespace hearth {

class ServeHandler final : public broker::Handler, public ServeLoop::Sink {
 public:
  using ClientId = ServeLoop::ClientId;  // broker::ClientId

  struct Options {
    // Per client: undelivered events beyond this hold its requests until it reads.
    std::size_t max_queued_event_bytes = 0;
    std::size_t max_events_reply_bytes = 0;  // one events reply's events, at most
    std::chrono::milliseconds idle_exit{0};  // for the idle exit's log line
    bool quiet = false;                      // no log lines on stderr
  };

  // Binds the broker's socket (throws if it cannot).
  ServeHandler(broker::BrokerOptions broker, Options options);

  // Serves until the broker stops: idle, an admin shutdown, or drained after loop.stop().
  void run(ServeLoop& loop);

  // broker::Handler, on the broker's loop thread.
  broker::Reply handle(broker::Session& session, const ipc::Request& request) override;
  // A client of a serving worker (the gateway) may stay quiet between requests for as long as
  // it likes: its connection is its subscription, and the worker has its own idle exit.
  void on_connect(broker::Session& session) override { session.set_holds_lease(true); }
  void on_disconnect(broker::Session& session) override;

  // ServeLoop::Sink, on the loop's threads: each is posted to the broker's loop thread.
  void answer(ClientId client, ServeLoop::ReplyTo reply_to, nlohmann::json result) override;
  void refuse(ClientId client, ServeLoop::ReplyTo reply_to, std::string message) override;
  void deliver(std::vector<ServeLoop::ClientOutput> outputs) override;
  void idle() override;
  void drain() override;
  void stop_now() override;

 private:
  // The engine's stats ride on every events reply, so the gateway's /metrics reads the last ones
  // pushed instead of asking a worker that may be busy or stopped.
  nlohmann::json with_stats(nlohmann::json reply) const;
  // Loop thread: an events reply taken from a client's queue, the client's hold let go first
  // if it has read enough.
  broker::Reply events_reply(ClientId client, ClientEventQueues::Taken taken);
  void complete(ClientEventQueues::Answer answer);
  void stop_when_drained();

  Options options_;
  std::unique_ptr<broker::Broker> broker_;
  ServeLoop* loop_ = nullptr;
  ClientEventQueues queues_;     // loop thread only
  bool draining_ = false;        // loop thread: shutting down, events still out
  bool stop_requested_ = false;  // loop thread
};

}  // namespace hearth
