#include "worker/serve_loop.h"

#include <cstdio>
#include <optional>
#include <utility>

#include "ipc/errors.h"
#include "worker/serve_protocol.h"

namespace hearth {

namespace {

using Clock = std::chrono::steady_clock;

std::string engine_id(ServeLoop::ClientId client, const std::string& id) {
  return std::to_string(client) + ":" + id;
}

std::string client_prefix(ServeLoop::ClientId client) {
  return std::to_string(client) + ":";
}

// The engine's output, under the client's own id.
ServeLoop::ClientOutput client_output(RequestOutput output) {
  const std::size_t colon = output.id.find(':');
  ServeLoop::ClientOutput out;
  out.client = std::stoull(output.id.substr(0, colon));
  output.id = output.id.substr(colon + 1);
  out.output = std::move(output);
  return out;
}

}  // namespace

ServeLoop::ServeLoop(Engine& engine, const RequestSettings& defaults, const Tokenizer* tokenizer,
                     Options options, Sink& sink)
    : engine_(engine),
      defaults_(defaults),
      tokenizer_(tokenizer),
      options_(options),
      sink_(sink),
      stats_(engine.stats()),  // before the first step: the pool (a lease) is there already
      engine_thread_([this] { engine_loop(); }),
      prepare_thread_([this] { prepare_loop(); }) {}

ServeLoop::~ServeLoop() {
  finish();
  engine_thread_.join();
  prepare_thread_.join();
}

void ServeLoop::submit(ClientId client, ReplyTo reply_to, nlohmann::json request) {
  Command c{Command::kSubmit, client, reply_to};
  c.body = std::move(request);
  push(std::move(c));
}

void ServeLoop::cancel(ClientId client, ReplyTo reply_to, std::string id) {
  Command c{Command::kCancel, client, reply_to};
  c.id = std::move(id);
  push(std::move(c));
}

void ServeLoop::disconnect(ClientId client) {
  push(Command{Command::kDisconnect, client});
}

void ServeLoop::hold(ClientId client, bool held) {
  Command c{Command::kHold, client};
  c.held = held;
  to_engine(std::move(c));
}

void ServeLoop::stop(std::string reason) {
  {
    std::lock_guard lock(mutex_);
    if (finished_) return;
    stop_reason_ = std::move(reason);
    stopping_ = true;
  }
  wake_.notify_all();
}

void ServeLoop::finish() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    finished_ = true;
  }
  wake_.notify_all();
  prepare_.notify_all();
}

EngineStats ServeLoop::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

IterationTokens ServeLoop::iteration_tokens() const {
  std::lock_guard lock(mutex_);
  return iteration_tokens_;
}

void ServeLoop::push(Command command) {
  {
    std::lock_guard lock(mutex_);
    to_prepare_.push_back(std::move(command));
    ++preparing_;
  }
  prepare_.notify_all();
}

void ServeLoop::to_engine(Command command) {
  {
    std::lock_guard lock(mutex_);
    inbox_.push_back(std::move(command));
  }
  wake_.notify_all();
}

// Prepare thread: reads each submit's request (tokenizing its prompt) away from the caller's
// thread, then hands every command on to the engine thread in the order it came.
void ServeLoop::prepare_loop() {
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
        engine_.prepare(c.request);
      } catch (const ipc::ProtocolError& e) {
        refused = e.message();
      } catch (const std::exception& e) {  // e.g. out of memory: this request only
        refused = std::string("submit: ") + e.what();
      }
    }
    if (refused) {
      sink_.refuse(c.client, c.reply_to, *refused);
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

// Engine thread: commands, then one step, until stopped or idle.
void ServeLoop::engine_loop() {
  Clock::time_point idle_since = Clock::now();
  Clock::time_point next_probe = Clock::now() + options_.probe_interval;
  const bool probing = options_.probe_interval.count() > 0;
  for (;;) {
    std::vector<Command> commands;
    bool stopping = false;
    std::string reason;
    {
      std::unique_lock lock(mutex_);
      // Idle: nothing live (held requests are in flight), nothing on its way.
      for (;;) {
        if (finished_) return;
        if (!inbox_.empty() || engine_.can_step() || stopping_) break;
        if (probing && Clock::now() >= next_probe) {
          lock.unlock();  // the engine is this thread's alone; the lock guards the inbox
          std::string why = engine_.probe_backend();
          lock.lock();
          next_probe = Clock::now() + options_.probe_interval;
          if (!why.empty() && !finished_) {
            stop_reason_ = std::move(why);
            stopping_ = true;
          }
          continue;
        }
        const Clock::time_point wake_by =
            probing ? next_probe : Clock::now() + std::chrono::hours(24);
        if (options_.idle_exit.count() == 0 || engine_.has_work() || preparing_ > 0) {
          if (wake_.wait_until(lock, wake_by) == std::cv_status::no_timeout)
            idle_since = Clock::now();
          continue;
        }
        if (Clock::now() >= idle_since + options_.idle_exit) {
          lock.unlock();
          sink_.idle();
          return;
        }
        wake_.wait_until(lock, std::min(wake_by, idle_since + options_.idle_exit));
      }
      commands.swap(inbox_);
      stopping = stopping_;
      reason = stop_reason_;
      if (finished_) return;  // nobody is left to answer
    }
    for (Command& c : commands) run(c);
    if (stopping) {
      for (const std::string& id : engine_.live_ids())
        engine_.fail(id, "the worker is shutting down (" + reason + ")");
    }
    std::vector<ClientOutput> outputs;
    const bool stepped = engine_.can_step();
    if (stepped)
      for (RequestOutput& out : engine_.step()) outputs.push_back(client_output(std::move(out)));
    {
      // Before the outputs are delivered: the events reply that carries them carries these
      // stats, so a gateway that stops polling once nothing is in flight keeps no stale count.
      std::lock_guard lock(mutex_);
      stats_ = engine_.stats();
      if (stepped) iteration_tokens_.observe(stats_.last_step_tokens);
    }
    if (stepped) sink_.deliver(std::move(outputs));
    // A backend that can run no more (a tensor-parallel rank died): the live requests end with
    // an error and the worker stops, for its supervisor to start it again.
    if (stepped && !stopping)
      if (std::string why = engine_.backend_failure(); !why.empty()) stop(std::move(why));
    if (stopping && !engine_.has_work()) {
      // After the last events: clients collect them, then serving stops; a client that does
      // not come for its events within the grace period is closed anyway.
      sink_.drain();
      std::unique_lock lock(mutex_);
      if (!wake_.wait_for(lock, options_.shutdown_grace, [&] { return finished_; })) {
        lock.unlock();
        sink_.stop_now();
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

void ServeLoop::run(Command& c) {
  switch (c.kind) {
    case Command::kSubmit: {
      const std::string id = c.request.id;
      c.request.id = engine_id(c.client, id);
      try {
        engine_.submit(std::move(c.request));
        if (held_clients_.contains(c.client)) engine_.hold(engine_id(c.client, id), true);
        sink_.answer(c.client, c.reply_to, {{"request_id", id}});
      } catch (const RequestError& e) {
        sink_.refuse(c.client, c.reply_to,
                     "request '" + id + "': " + e.field() + ": " + e.reason());
      }
      return;
    }
    case Command::kHold: {
      if (c.held)
        held_clients_.insert(c.client);
      else
        held_clients_.erase(c.client);
      const std::string prefix = client_prefix(c.client);
      for (const std::string& id : engine_.live_ids())
        if (id.starts_with(prefix)) engine_.hold(id, c.held);
      return;
    }
    case Command::kCancel:
      sink_.answer(c.client, c.reply_to,
                   {{"cancelled", engine_.cancel(engine_id(c.client, c.id))}});
      return;
    case Command::kDisconnect: {
      held_clients_.erase(c.client);
      const std::string prefix = client_prefix(c.client);
      for (const std::string& id : engine_.live_ids())
        if (id.starts_with(prefix)) engine_.cancel(id);
      return;
    }
  }
}

}  // namespace hearth
