#include "worker/engine_server.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "broker/broker.h"
#include "worker/engine/event_json.h"
#include "worker/request_file.h"

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
    if (options.quiet) b.log = nullptr;
    broker_ = std::make_unique<broker::Broker>(std::move(b), *this);
  }

  void run() {
    std::thread engine_thread([this] { engine_loop(); });
    std::thread signal_thread([this] { watch_signals(); });
    broker_->run();
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      finished_ = true;
    }
    wake_.notify_all();
    engine_thread.join();
    signal_thread.join();
  }

  // Loop thread: the broker's calls.
  Reply handle(broker::Session& session, const ipc::Request& request) override {
    const ClientId client = session.id();
    if (request.op == ipc::op::kSubmit) return submit(client, request);
    if (request.op == ipc::op::kEvents) return events(client, request.id);
    if (request.op == ipc::op::kCancel) {
      push({Command::kCancel,
            client,
            request.id,
            {},
            ipc::string_field(request.body, "request_id")});
      return Reply::deferred();
    }
    if (request.op == ipc::op::kStats) {
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
    push({Command::kDisconnect, session.id(), 0, {}, {}});
  }

 private:
  struct Command {
    enum Kind { kSubmit, kCancel, kDisconnect } kind;
    ClientId client;
    ipc::RequestId reply_to;  // the deferred request to answer
    Request request;          // kSubmit
    std::string id;           // kCancel: the client's request id
  };

  // What the loop thread keeps per client.
  struct ClientState {
    std::deque<json> events;
    std::optional<ipc::RequestId> waiting;  // a deferred events call
    int in_flight = 0;                      // submitted and not yet ended
  };

  Reply submit(ClientId client, const ipc::Request& request) {
    const json* body = request.body.contains("request") ? &request.body["request"] : nullptr;
    if (!body) throw ipc::ProtocolError(ipc::ErrorCode::kBadRequest, "submit needs a \"request\"");
    Request r;
    try {
      r = request_from_json(*body, defaults_, tokenizer_, "submit");
    } catch (const std::runtime_error& e) {
      throw ipc::ProtocolError(ipc::ErrorCode::kBadRequest, e.what());
    }
    ++clients_[client].in_flight;
    push({Command::kSubmit, client, request.id, std::move(r), {}});
    return Reply::deferred();
  }

  Reply events(ClientId client, ipc::RequestId id) {
    ClientState& c = clients_[client];
    if (c.waiting)
      throw ipc::ProtocolError(ipc::ErrorCode::kBusy, "an events call is already waiting");
    if (!c.events.empty() || c.in_flight == 0) {
      Reply reply = Reply::ok({{"events", take_events(c)}});
      stop_when_drained();  // the broker writes this reply before it stops
      return reply;
    }
    c.waiting = id;
    return Reply::deferred();
  }

  static json take_events(ClientState& c) {
    json list = json::array();
    for (json& e : c.events) list.push_back(std::move(e));
    c.events.clear();
    return list;
  }

  // Loop thread: a step's outputs reach their clients.
  void deliver(const std::vector<RequestOutput>& outputs) {
    for (const RequestOutput& out : outputs) {
      const auto [client, id] = split_engine_id(out.id);
      auto it = clients_.find(client);
      if (it == clients_.end()) continue;  // gone
      ClientState& c = it->second;
      for (const TokenOutput& t : out.tokens) c.events.push_back(token_event_json(id, t));
      if (out.finish) {
        c.events.push_back(done_event_json(id, *out.finish));
        --c.in_flight;
      }
    }
    for (auto& [client, c] : clients_) answer_waiting(client, c);
  }

  // Loop thread: a waiting events call is answered once there is something to say.
  void answer_waiting(ClientId client, ClientState& c) {
    if (!c.waiting || (c.events.empty() && c.in_flight > 0)) return;
    broker_->complete(client, *c.waiting, Reply::ok({{"events", take_events(c)}}));
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

  void push(Command command) {
    {
      std::lock_guard lock(mutex_);
      inbox_.push_back(std::move(command));
    }
    wake_.notify_all();
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
        auto ready = [&] { return !inbox_.empty() || engine_.has_work() || stopping_; };
        if (options_.idle_exit.count() > 0) {
          if (!wake_.wait_until(lock, idle_since + options_.idle_exit, ready)) {
            lock.unlock();
            if (!options_.quiet)
              std::fprintf(stderr, "hearth-worker: idle for %lld ms, exiting\n",
                           static_cast<long long>(options_.idle_exit.count()));
            broker_->shutdown();
            return;
          }
        } else {
          wake_.wait(lock, ready);
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
      if (engine_.has_work()) {
        std::vector<RequestOutput> outputs = engine_.step();
        {
          std::lock_guard lock(mutex_);
          stats_ = engine_.stats();
        }
        broker_->post([this, outputs = std::move(outputs)] { deliver(outputs); });
      }
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
          answer(c.client, c.reply_to, Reply::ok({{"request_id", id}}));
        } catch (const RequestError& e) {
          broker_->post([this, client = c.client] {
            auto it = clients_.find(client);
            if (it == clients_.end()) return;
            --it->second.in_flight;
            answer_waiting(client, it->second);
          });
          answer(c.client, c.reply_to,
                 Reply::error(ipc::ErrorCode::kBadRequest,
                              "request '" + id + "': " + e.field() + ": " + e.reason()));
        }
        return;
      }
      case Command::kCancel:
        answer(c.client, c.reply_to,
               Reply::ok({{"cancelled", engine_.cancel(engine_id(c.client, c.id))}}));
        return;
      case Command::kDisconnect: {
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
  bool draining_ = false;                    // loop thread: shutting down, events still out
  bool stop_requested_ = false;

  std::mutex mutex_;  // guards what follows
  std::condition_variable wake_;
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
