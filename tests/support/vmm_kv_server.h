// A weight server with the vmm backend inside the test process, for GPU tests of KV leases and
// shared prefix KV: the real ServerHandler (no model: it only leases chunks) behind a real broker
// on a real socket, serving on its own thread, and clients of it. Construct it only once
// vmm_gpu_available() said yes.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "broker/broker.h"
#include "ipc/client.h"
#include "ipc/protocol.h"
#include "tests/support/temp_dir.h"
#include "weight-server/daemon/server_handler.h"
#include "weight-server/sharing/vmm_backend.h"

namespace hearth::test {

class VmmKvServer {
 public:
  VmmKvServer() : handler_(serve_options()) {
    broker::BrokerOptions options;
    options.socket_path = dir_ / "run/hearth.sock";
    options.handle_signals = false;
    broker_ = std::make_unique<broker::Broker>(options, handler_);
    thread_ = std::thread([this] { broker_->run(); });
  }
  ~VmmKvServer() {
    broker_->shutdown();
    thread_.join();
  }
  VmmKvServer(const VmmKvServer&) = delete;
  VmmKvServer& operator=(const VmmKvServer&) = delete;

  const std::string& socket() const { return broker_->socket_path(); }
  // A new connection: one worker's, as LeasedKvMemory takes it.
  std::shared_ptr<ipc::Client> client() const {
    ipc::ClientOptions options;
    options.timeout = std::chrono::seconds(60);
    return std::make_shared<ipc::Client>(ipc::Client::connect(socket(), options));
  }
  nlohmann::json stats() const { return client()->call(ipc::op::kStats).body; }

  // The reservation a served worker makes for its pool on device 0 (LeasedKvMemory::Reserve).
  static std::function<std::unique_ptr<KvChunkRange>(uint64_t)> device_range() {
    return [](uint64_t bytes) { return reserve_vmm_kv_range(0, bytes); };
  }

 private:
  static ServeOptions serve_options() {
    ServeOptions serve;
    serve.backend = "vmm";
    return serve;
  }

  TempDir dir_;
  ServerHandler handler_;
  std::unique_ptr<broker::Broker> broker_;
  std::thread thread_;
};

}  // namespace hearth::test
