// A serving worker's engine loop (engine_server.h), apart from its sockets. Clients' commands
// (submit, cancel, a client gone) reach the engine in the order each client sent them: submits
// are read first (their prompts tokenized) on a prepare thread of their own, so a long prompt
// stalls no other client, and the engine thread runs the commands, then one step, until stopped
// or idle. Request ids are the client's: the engine sees "<client>:<id>", so two clients may
// both say "r1". A held client's requests (hold()) are not scheduled but keep their KV; its
// requests submitted while held are held too. What the loop has to say goes to its Sink.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/protocol.h"
#include "worker/engine/engine.h"
#include "worker/iteration_tokens.h"

namespace hearth {

class Tokenizer;

class ServeLoop {
 public:
  using ClientId = std::uint64_t;
  using ReplyTo = ipc::RequestId;  // the client's deferred request to answer

  // A step's output for one of `client`'s requests; output.id is the client's own id.
  struct ClientOutput {
    ClientId client = 0;
    RequestOutput output;
  };

  // Where the loop's results go, called from its threads (prepare or engine): an
  // implementation hands them on to a thread of its own.
  class Sink {
   public:
    virtual ~Sink() = default;
    // A request's answer: submit {"request_id"}, cancel {"cancelled"}.
    virtual void answer(ClientId client, ReplyTo reply_to, nlohmann::json result) = 0;
    // A submit that will not run (bad_request, `message` naming the request and field).
    virtual void refuse(ClientId client, ReplyTo reply_to, std::string message) = 0;
    // One step's outputs.
    virtual void deliver(std::vector<ClientOutput> outputs) = 0;
    // Nothing in flight nor on its way for Options::idle_exit: time to exit.
    virtual void idle() = 0;
    // Stopping, and every request has ended: let clients collect their last events, then stop.
    virtual void drain() = 0;
    // Draining took longer than Options::shutdown_grace: stop anyway.
    virtual void stop_now() = 0;
  };

  struct Options {
    std::chrono::milliseconds idle_exit{0};  // 0: never idle
    std::chrono::milliseconds shutdown_grace{5000};
    // While nothing can step, how often the engine thread asks the backend whether it can still
    // run (Engine::probe_backend): a follower that died while the worker was idle stops the
    // worker then, for its supervisor to start the group again, not at the next request. 0: never.
    std::chrono::milliseconds probe_interval{500};
  };

  // Starts the prepare and engine threads. `defaults` are the profile's request settings, which
  // each request's own override. The engine, tokenizer and sink must outlive the loop.
  ServeLoop(Engine& engine, const RequestSettings& defaults, const Tokenizer* tokenizer,
            Options options, Sink& sink);
  // finish(), then joins the threads.
  ~ServeLoop();
  ServeLoop(const ServeLoop&) = delete;
  ServeLoop& operator=(const ServeLoop&) = delete;

  // A submit's request object, read (and refused, if it must be) on the prepare thread.
  void submit(ClientId client, ReplyTo reply_to, nlohmann::json request);
  void cancel(ClientId client, ReplyTo reply_to, std::string id);
  // The client is gone: its requests are cancelled.
  void disconnect(ClientId client);
  // Holds the client's requests or lets them go; ahead of its queued commands (a hold keeps
  // no order with them).
  void hold(ClientId client, bool held);
  // Every request in flight ends with an error event ("the worker is shutting down
  // (`reason`)"), then the loop drains (Sink::drain) and its engine thread ends.
  void stop(std::string reason);
  // Serving is over (nobody is left to answer): the threads return. Idempotent.
  void finish();

  // The engine's counters as of its last step.
  EngineStats stats() const;
  // The tokens of every step so far.
  IterationTokens iteration_tokens() const;

 private:
  // A client's command on its way to the engine thread: through the prepare thread first, in
  // the order the client sent it (holds go straight to the engine thread).
  struct Command {
    enum Kind { kSubmit, kCancel, kDisconnect, kHold };
    Command() = default;
    Command(Kind k, ClientId c, ReplyTo to = 0) : kind(k), client(c), reply_to(to) {}
    Kind kind = kSubmit;
    ClientId client = 0;
    ReplyTo reply_to = 0;  // kSubmit, kCancel: the deferred request to answer
    nlohmann::json body;   // kSubmit: the request object, read on the prepare thread
    Request request;       // kSubmit, once read
    std::string id;        // kCancel: the client's request id
    bool held = false;     // kHold: hold the client's requests, or let them go
  };

  void push(Command command);
  void to_engine(Command command);
  void prepare_loop();
  void engine_loop();
  void run(Command& c);

  Engine& engine_;
  const RequestSettings defaults_;
  const Tokenizer* tokenizer_;
  const Options options_;
  Sink& sink_;
  std::set<ClientId> held_clients_;  // engine thread only

  mutable std::mutex mutex_;         // guards what follows
  std::condition_variable wake_;     // the engine thread's
  std::condition_variable prepare_;  // the prepare thread's
  std::deque<Command> to_prepare_;
  int preparing_ = 0;  // commands not yet in the inbox (submits still being read)
  std::vector<Command> inbox_;
  bool stopping_ = false;  // fail what is in flight, then drain
  bool finished_ = false;  // nobody is left to answer
  std::string stop_reason_ = "SIGTERM";
  EngineStats stats_;
  IterationTokens iteration_tokens_;

  std::thread engine_thread_;
  std::thread prepare_thread_;
};

}  // namespace hearth
