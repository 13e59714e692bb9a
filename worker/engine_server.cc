#include "worker/engine_server.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "broker/broker.h"
#include "worker/engine/event_json.h"
#include "worker/serve_protocol.h"

namespace hearth {

namespace {

using json = nlohmann::json;
using broker::ClientId;
using broker::Reply;
using Clock = std::chrono::steady_clock;

// How long a shutting-down worker waits for its clients to collect their last events.
constexpr std::chrono::seconds kShutdownGrace{5};

// The engine sees "<client>:<id>", so ids chosen by different clients never collide.
std::string engine_id(ClientId client, const std::string& id) {
  return std::to_string(client) + ":" + id;
}

std::pair<ClientId, std::string> split_engine_id(const std::string& id) {
  const size_t colon = id.find(':');
  return {std::stoull(id.substr(0, colon)), id.substr(colon + 1)};
}

json stats_json(const EngineStats& s) {
  return {{"running", s.running},
          {"waiting", s.waiting},
          {"kv_blocks_used", s.kv_blocks_used},
          {"kv_blocks_total", s.kv_blocks_total},
          {"kv_block_size", s.kv_block_size},
          {"steps", s.steps},
          {"last_step_sequences", s.last_step_sequences},
          {"last_step_tokens", s.last_step_tokens},
          {"forwarded_tokens", s.forwarded_tokens},
          {"generated_tokens", s.generated_tokens},
          {"preemptions", s.preemptions},
          {"finished", s.finished},
          {"aborted", s.cancelled},
          {"held", s.held},
          {"prefix_cache_queries", s.prefix_cache_queries},
          {"prefix_cache_hits", s.prefix_cache_hits},
          {"prefix_cache_blocks", s.prefix_cache_blocks},
          {"prefix_cache_evicted_blocks", s.prefix_cache_evicted_blocks}};
}

class EngineServer final : public broker::Handler {
 public:
  EngineServer(Engine& engine, const ServeOptions& options, const RequestSettings& defaults,
               const Tokenizer* tokenizer)
      : engine_(engine), options_(options), defaults_(defaults), tokenizer_(tokenizer) {
    broker::BrokerOptions b;
    b.socket_path = options.socket_path;
    b.server_name = "hearth-worker";
    b.handle_signals = false;  // ours: in-flight requests must end with an error event first
    b.max_request_bytes = options.max_request_bytes;
    b.hello_fields = {{"max_request_bytes", options.max_request_bytes},
                      {"max_request_id_bytes", ipc::kMaxRequestIdBytes},
                      {"max_events_reply_bytes", reply_bytes()}};
    // Any client of the worker's uid may submit, but only the process that started the worker
    // (its supervisor: the gateway) may stop it with a request.
    b.admin_pid = ::getppid();
    if (options.quiet) b.log = nullptr;
    broker_ = std::make_unique<broker::Broker>(std::move(b), *this);
  }

  void run() {
    std::thread engine_thread([this] { engine_loop(); });
    std::thread prepare_thread([this] { prepare_loop(); });
    std::thread signal_thread([this] { watch_signals(); });
    broker_->run();
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      finished_ = true;
    }
    wake_.notify_all();
    prepare_.notify_all();
    engine_thread.join();
    prepare_thread.join();
    signal_thread.join();
  }

  // Loop thread: the broker's calls.
  Reply handle(broker::Session& session, const ipc::Request& request) override {
    const ClientId client = session.id();
    if (request.op == ipc::op::kSubmit) return submit(client, request);
    if (request.op == ipc::op::kEvents) {
      check_no_arguments(request.body, "events");
      return events(client, request.id);
    }
    if (request.op == ipc::op::kCancel) {
      Command c(Command::kCancel, client, request.id);
      c.id = cancel_request_id(request.body);
      push(std::move(c));
      return Reply::deferred();
    }
    if (request.op == ipc::op::kStats) {
      check_no_arguments(request.body, "stats");
      std::lock_guard lock(mutex_);
      return Reply::ok(stats_json(stats_));
    }
    return Reply::error(ipc::ErrorCode::kUnknownOp,
                        "a serving hearth-worker does not handle '" + request.op + "'");
  }

  // A client of a serving worker (the gateway) may stay quiet between requests for as long as
  // it likes: its connection is its subscription, and the worker has its own idle exit.
  void on_connect(broker::Session& session) override { session.set_holds_lease(true); }

  void on_disconnect(broker::Session& session) override {
    clients_.erase(session.id());
    push(Command(Command::kDisconnect, session.id()));
  }

 private:
  // What a client asked for, on its way to the engine thread: through the prepare thread first
  // (submits are read and tokenized there), in the order the client sent them.
  struct Command {
    enum Kind { kSubmit, kCancel, kDisconnect, kHold };
    Command() = default;
    Command(Kind k, ClientId c, ipc::RequestId to = 0) : kind(k), client(c), reply_to(to) {}
    static Command hold(ClientId c, bool held) {
      Command command(kHold, c);
      command.held = held;
      return command;
    }
    Kind kind = kSubmit;
    ClientId client = 0;
    ipc::RequestId reply_to = 0;  // the deferred request to answer
    json body;                    // kSubmit: the request object, read on the prepare thread
    Request request;              // kSubmit, once read
    std::string id;               // kCancel: the client's request id
    bool held = false;            // kHold: hold the client's requests, or let them go
  };

  // What the loop thread keeps per client. Events wait as JSON text: a parsed event with 20
  // top logprobs takes ~20 times its text's size, which the bound would not see.
  struct ClientState {
    std::deque<std::string> events;
    size_t queued_bytes = 0;
    bool held = false;                      // its requests are held until it reads
    std::optional<ipc::RequestId> waiting;  // a deferred events call
    int in_flight = 0;                      // submitted and not yet ended
  };

  size_t reply_bytes() const {
    return std::min(ipc::kMaxEventsReplyBytes, options_.max_queued_event_bytes);
  }

  Reply submit(ClientId client, const ipc::Request& request) {
    Command c(Command::kSubmit, client, request.id);
    c.body = submit_request_object(request.body);
    ++clients_[client].in_flight;
    push(std::move(c));
    return Reply::deferred();
  }

  Reply events(ClientId client, ipc::RequestId id) {
    ClientState& c = clients_[client];
    if (c.waiting)
      throw ipc::ProtocolError(ipc::ErrorCode::kBusy, "an events call is already waiting");
    if (!c.events.empty() || c.in_flight == 0) {
      Reply reply = Reply::ok(take_events(client, c));
      stop_when_drained();  // the broker writes this reply before it stops
      return reply;
    }
    c.waiting = id;
    return Reply::deferred();
  }

  // Loop thread: the next events reply, at most reply_bytes() of events (at least one); a held
  // client that has read enough lets its requests run again.
  json take_events(ClientId client, ClientState& c) {
    json list = json::array();
    size_t bytes = 0;
    while (!c.events.empty()) {
      const std::string& e = c.events.front();
      if (!list.empty() && bytes + e.size() > reply_bytes()) break;
      bytes += e.size();
      c.queued_bytes -= e.size();
      list.push_back(json::parse(e));  // our own text: it parses
      c.events.pop_front();
    }
    if (c.held && c.queued_bytes <= options_.max_queued_event_bytes / 2) {
      c.held = false;
      to_engine(Command::hold(client, false));
    }
    // The engine's stats ride on every events reply, so the gateway's /metrics reads the last
    // ones pushed instead of asking a worker that may be busy or stopped.
    json stats;
    {
      std::lock_guard lock(mutex_);
      stats = stats_json(stats_);
    }
    return {{"events", std::move(list)}, {"more", !c.events.empty()}, {"stats", std::move(stats)}};
  }

  void enqueue(ClientState& c, const json& event) {
    std::string text = event.dump(-1, ' ', false, json::error_handler_t::replace);
    c.queued_bytes += text.size();
    c.events.push_back(std::move(text));
  }

  // Loop thread: a step's outputs reach their clients.
  void deliver(const std::vector<RequestOutput>& outputs) {
    for (const RequestOutput& out : outputs) {
      const auto [client, id] = split_engine_id(out.id);
      auto it = clients_.find(client);
      if (it == clients_.end()) continue;  // gone
      ClientState& c = it->second;
      for (const TokenOutput& t : out.tokens) enqueue(c, token_event_json(id, t));
      if (out.finish) {
        enqueue(c, done_event_json(id, *out.finish));
        --c.in_flight;
      }
      if (!c.held && c.queued_bytes > options_.max_queued_event_bytes) {
        // Back-pressure: its requests wait (keeping their KV) until it reads.
        c.held = true;
        to_engine(Command::hold(client, true));
      }
    }
    for (auto& [client, c] : clients_) answer_waiting(client, c);
  }

  // Loop thread: a waiting events call is answered once there is something to say.
  void answer_waiting(ClientId client, ClientState& c) {
    if (!c.waiting || (c.events.empty() && c.in_flight > 0)) return;
    broker_->complete(client, *c.waiting, Reply::ok(take_events(client, c)));
    c.waiting.reset();
    stop_when_drained();
  }

  // Loop thread: while shutting down, stops the broker once every client has its events.
  void stop_when_drained() {
    if (!draining_ || stop_requested_) return;
    for (const auto& [client, c] : clients_)
      if (!c.events.empty()) return;
    stop_requested_ = true;
    broker_->shutdown();
  }

  // Engine thread: answers a deferred request on the loop thread.
  void answer(ClientId client, ipc::RequestId id, Reply reply) {
    // std::function needs a copyable callable; a Reply may own descriptors.
    auto shared = std::make_shared<Reply>(std::move(reply));
    broker_->post(
        [this, client, id, shared] { broker_->complete(client, id, std::move(*shared)); });
  }

  // Loop thread: a client's command, through the prepare thread.
  void push(Command command) {
    {
      std::lock_guard lock(mutex_);
      to_prepare_.push_back(std::move(command));
      ++preparing_;
    }
    prepare_.notify_all();
  }

  // Straight to the engine thread (holds: no order to keep with the client's commands).
  void to_engine(Command command) {
    {
      std::lock_guard lock(mutex_);
      inbox_.push_back(std::move(command));
    }
    wake_.notify_all();
  }

  // Prepare thread: reads each submit's request (tokenizing its prompt) away from the loop
  // thread, then hands every command on to the engine thread in the order it came.
  void prepare_loop() {
    for (;;) {
      Command c;
      {
        std::unique_lock lock(mutex_);
        prepare_.wait(lock, [&] { return !to_prepare_.empty() || finished_; });
        if (finished_) return;
        c = std::move(to_prepare_.front());
        to_prepare_.pop_front();
      }
      std::optional<std::string> refused;
      if (c.kind == Command::kSubmit) {
        try {
          c.request = submit_request(std::move(c.body), defaults_, tokenizer_);
        } catch (const ipc::ProtocolError& e) {
          refused = e.message();
        } catch (const std::exception& e) {  // e.g. out of memory: this request only
          refused = std::string("submit: ") + e.what();
        }
      }
      if (refused) {
        refuse_submit(c.client, c.reply_to, *refused);
        std::lock_guard lock(mutex_);
        --preparing_;
      } else {
        std::lock_guard lock(mutex_);
        inbox_.push_back(std::move(c));
        --preparing_;
      }
      wake_.notify_all();
    }
  }

  // Prepare or engine thread: a submit that will not run; its client stops waiting for it.
  void refuse_submit(ClientId client, ipc::RequestId reply_to, const std::string& message) {
    broker_->post([this, client] {
      auto it = clients_.find(client);
      if (it == clients_.end()) return;
      --it->second.in_flight;
      answer_waiting(client, it->second);
    });
    answer(client, reply_to, Reply::error(ipc::ErrorCode::kBadRequest, message));
  }

  // Engine thread: commands, then one step, until stopped or idle.
  void engine_loop() {
    Clock::time_point idle_since = Clock::now();
    for (;;) {
      std::vector<Command> commands;
      bool stopping = false;
      std::string signal_name;
      {
        std::unique_lock lock(mutex_);
        // Idle: nothing live (held requests are in flight), nothing on its way.
        for (;;) {
          if (finished_) return;
          if (!inbox_.empty() || engine_.can_step() || stopping_) break;
          if (options_.idle_exit.count() == 0 || engine_.has_work() || preparing_ > 0) {
            wake_.wait(lock);
            idle_since = Clock::now();
            continue;
          }
          if (Clock::now() >= idle_since + options_.idle_exit) {
            lock.unlock();
            if (!options_.quiet)
              std::fprintf(stderr, "hearth-worker: idle for %lld ms, exiting\n",
                           static_cast<long long>(options_.idle_exit.count()));
            broker_->shutdown();
            return;
          }
          wake_.wait_until(lock, idle_since + options_.idle_exit);
        }
        commands.swap(inbox_);
        stopping = stopping_;
        signal_name = signal_name_;
        if (finished_) return;  // the broker has stopped: nobody is left to answer
      }
      for (Command& c : commands) run(c);
      if (stopping) {
        for (const std::string& id : engine_.live_ids())
          engine_.fail(id, "the worker is shutting down (" + signal_name + ")");
      }
      std::optional<std::vector<RequestOutput>> outputs;
      if (engine_.can_step()) outputs = engine_.step();
      {
        // Before the outputs are delivered: the events reply that carries them carries these.
        std::lock_guard lock(mutex_);
        stats_ = engine_.stats();
      }
      if (outputs) broker_->post([this, list = std::move(*outputs)] { deliver(list); });
      if (stopping && !engine_.has_work()) {
        // Posted after the last events: clients collect them, then the broker stops; a client
        // that does not come for its events within the grace period is closed anyway.
        broker_->post([this] {
          draining_ = true;
          stop_when_drained();
        });
        std::unique_lock lock(mutex_);
        if (!wake_.wait_for(lock, kShutdownGrace, [&] { return finished_; })) {
          lock.unlock();
          broker_->shutdown();
          lock.lock();
          wake_.wait(lock, [&] { return finished_; });
        }
        return;
      }
      if (engine_.has_work())
        idle_since = Clock::now();
      else if (!commands.empty())
        idle_since = Clock::now();
    }
  }

  void run(Command& c) {
    switch (c.kind) {
      case Command::kSubmit: {
        const std::string id = c.request.id;
        c.request.id = engine_id(c.client, id);
        try {
          engine_.submit(std::move(c.request));
          if (held_clients_.contains(c.client)) engine_.hold(engine_id(c.client, id), true);
          answer(c.client, c.reply_to, Reply::ok({{"request_id", id}}));
        } catch (const RequestError& e) {
          refuse_submit(c.client, c.reply_to,
                        "request '" + id + "': " + e.field() + ": " + e.reason());
        }
        return;
      }
      case Command::kHold: {
        if (c.held)
          held_clients_.insert(c.client);
        else
          held_clients_.erase(c.client);
        const std::string prefix = std::to_string(c.client) + ":";
        for (const std::string& id : engine_.live_ids())
          if (id.starts_with(prefix)) engine_.hold(id, c.held);
        return;
      }
      case Command::kCancel:
        answer(c.client, c.reply_to,
               Reply::ok({{"cancelled", engine_.cancel(engine_id(c.client, c.id))}}));
        return;
      case Command::kDisconnect: {
        held_clients_.erase(c.client);
        const std::string prefix = std::to_string(c.client) + ":";
        for (const std::string& id : engine_.live_ids())
          if (id.starts_with(prefix)) engine_.cancel(id);
        return;
      }
    }
  }

  // Signal thread: SIGTERM/SIGINT (blocked in every thread by serve()) start the shutdown.
  void watch_signals() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    const timespec tick{0, 100'000'000};
    for (;;) {
      const int sig = sigtimedwait(&set, nullptr, &tick);
      std::lock_guard lock(mutex_);
      if (finished_) return;
      if (sig == SIGTERM || sig == SIGINT) {
        signal_name_ = sig == SIGTERM ? "SIGTERM" : "SIGINT";
        stopping_ = true;
        wake_.notify_all();
      }
    }
  }

  Engine& engine_;
  ServeOptions options_;
  RequestSettings defaults_;
  const Tokenizer* tokenizer_;
  std::unique_ptr<broker::Broker> broker_;
  std::map<ClientId, ClientState> clients_;  // loop thread only
  std::set<ClientId> held_clients_;          // engine thread only
  bool draining_ = false;                    // loop thread: shutting down, events still out
  bool stop_requested_ = false;

  std::mutex mutex_;                 // guards what follows
  std::condition_variable wake_;     // the engine thread's
  std::condition_variable prepare_;  // the prepare thread's
  std::deque<Command> to_prepare_;
  int preparing_ = 0;  // commands not yet in the inbox (submits still being read)
  std::vector<Command> inbox_;
  bool stopping_ = false;  // fail what is in flight, then shut down
  bool finished_ = false;  // the broker has stopped
  std::string signal_name_ = "SIGTERM";
  EngineStats stats_;
};

}  // namespace

void block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void serve(Engine& engine, const ServeOptions& options, const RequestSettings& defaults,
           const Tokenizer* tokenizer) {
  block_stop_signals();  // for the threads started here; the caller's should have it already
  EngineServer server(engine, options, defaults, tokenizer);
  server.run();
}

}  // namespace hearth
