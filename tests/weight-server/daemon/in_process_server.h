#pragma once

// A weight server inside the test process: the real ServerHandler (or a handler wrapped around
// it) behind a real broker on a real socket, serving on its own thread. For the cases a
// separate process cannot set up: other uids, and a server that lies to its workers.

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "broker/broker.h"
#include "ipc/client.h"
#include "tests/ipc/test_util.h"
#include "tools/synth_model.h"
#include "weight-server/daemon/served_model.h"
#include "weight-server/daemon/server_handler.h"

namespace hearth::test {

// A client of the server at `socket`, called `name`, that waits up to a minute for a reply.
inline ipc::Client client_of(const std::string& socket, const std::string& name = "test") {
  ipc::ClientOptions options;
  options.name = name;
  options.timeout = std::chrono::seconds(60);
  return ipc::Client::connect(socket, options);
}

class InProcessServer {
 public:
  // Serves `model_dir` (a model directory) as "tiny" with the memfd backend, through `wrapper`
  // (which forwards to handler()) when one is given.
  // `device_bytes` and `memory_fraction` set the server's memory budget (0: the machine's RAM).
  InProcessServer(broker::BrokerOptions options, const std::string& model_dir,
                  broker::Handler* wrapper = nullptr, uint64_t device_bytes = 0,
                  double memory_fraction = 0.9)
      : handler_(serve_options(), device_bytes, memory_fraction) {
    ServeOptions serve = serve_options();
    handler_.add_model(load_served_model({model_dir, "tiny"}, serve));
    if (options.socket_path.empty()) options.socket_path = tmp_ / "run/hearth.sock";
    options.handle_signals = false;
    options.log = [this](std::string_view line) {
      std::lock_guard lock(mutex_);
      logs_.emplace_back(line);
    };
    broker_ = std::make_unique<broker::Broker>(options, wrapper ? *wrapper : handler_);
    thread_ = std::thread([this] { broker_->run(); });
  }
  ~InProcessServer() {
    broker_->shutdown();
    thread_.join();
    handler_.finish_loads();
  }

  const std::string& socket() const { return broker_->socket_path(); }
  ServerHandler& handler() { return handler_; }
  std::vector<std::string> logs() const {
    std::lock_guard lock(mutex_);
    return logs_;
  }

 private:
  ServeOptions serve_options() {
    ServeOptions serve;
    serve.backend = "memfd";
    serve.log = [this](std::string_view line) {
      std::lock_guard lock(mutex_);
      logs_.emplace_back(line);
    };
    return serve;
  }

  TempDir tmp_;
  mutable std::mutex mutex_;
  std::vector<std::string> logs_;
  ServerHandler handler_;
  std::unique_ptr<broker::Broker> broker_;
  std::thread thread_;
};

}  // namespace hearth::test
