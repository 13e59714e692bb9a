// Helper processes for the multi-process broker tests.
//   broker_test_helper server SOCKET [IDLE_MS]
//       Runs a broker with the test handler; prints "READY" once listening; exits 0 after a
//       graceful shutdown (SIGTERM/SIGINT or an admin shutdown).
//   broker_test_helper hold SOCKET
//       Connects, imports two allocations (taking a lease), prints "HELD <client_id>" and
//       waits to be killed, like a worker in the middle of a generation.

#include <unistd.h>

#include <cstdio>
#include <exception>
#include <string>

#include "broker/broker.h"
#include "ipc/client.h"
#include "test_handler.h"

namespace {

int serve(const std::string& socket, int idle_ms) {
  hearth::test::TestHandler handler;
  hearth::broker::BrokerOptions options;
  options.socket_path = socket;
  options.server_name = "broker-test-helper";
  options.idle_timeout = std::chrono::milliseconds(idle_ms);
  options.max_request_bytes = 1 << 20;
  hearth::broker::Broker broker(options, handler);
  std::printf("READY\n");
  std::fflush(stdout);
  broker.run();
  return 0;
}

int hold(const std::string& socket) {
  hearth::ipc::ClientOptions options;
  options.name = "holder";
  hearth::ipc::Client client = hearth::ipc::Client::connect(socket, options);
  const std::uint64_t ids[] = {5, 6};
  auto fds = client.import_allocations("test", ids);
  std::printf("HELD %llu\n", static_cast<unsigned long long>(
                                 client.server_hello()["client_id"].get<std::uint64_t>()));
  std::fflush(stdout);
  for (;;) ::pause();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "server" && argc >= 3)
      return serve(argv[2], argc >= 4 ? std::stoi(argv[3]) : 10'000);
    if (mode == "hold" && argc == 3) return hold(argv[2]);
    std::fprintf(stderr, "usage: %s server SOCKET [IDLE_MS] | hold SOCKET\n", argv[0]);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "broker_test_helper: %s\n", e.what());
    return 1;
  }
}
