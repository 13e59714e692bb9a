#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/fd_passing.h"
#include "ipc/frame.h"
#include "ipc/unix_socket.h"

namespace hearth::broker {

// Writes "hearth-broker: <line>" to stderr; the default for BrokerOptions::log.
void log_to_stderr(std::string_view line);

struct BrokerOptions {
  std::string socket_path;
  ipc::ListenOptions listen;           // socket file and directory modes
  std::string server_name = "hearth";  // reported by hello
  std::size_t max_request_bytes = std::size_t{1} << 20;
  std::size_t max_reply_bytes = ipc::kDefaultMaxFrameBytes;
  std::size_t max_clients = 256;  // further connections get "busy" and are closed
  // Connections one uid may hold at once (the admin uid excepted: it owns the server), so that
  // one allowed user cannot take every slot. Further connections from it get "busy".
  std::size_t max_clients_per_uid = 64;
  // A deadline, not an idle timer: a client must send its hello, each complete frame (counted
  // from the frame's first byte) and read each batch of replies within this long, or it is
  // dropped. Trickling a byte at a time does not extend it.
  std::chrono::milliseconds idle_timeout{10'000};
  // A greeted client with no request in flight that holds no lease (Session::holds_lease) is
  // dropped after this long without a request. A worker's connection is its lease: once it
  // holds one it may stay quiet for as long as it runs.
  std::chrono::milliseconds quiet_timeout{60'000};
  // Replies queued for one client beyond what its socket holds. The broker stops reading a
  // client's requests while its replies back up, so this bounds replies that complete later.
  std::size_t max_output_bytes = ipc::kDefaultMaxFrameBytes;
  std::size_t max_output_fds = 4 * ipc::kMaxFdsPerFrame;
  // uids that may connect; empty means only the server's effective uid. Others are refused
  // with "unauthorized" at accept.
  std::vector<uid_t> allowed_uids;
  // The uid whose clients may call admin ops; default: the server's effective uid.
  std::optional<uid_t> admin_uid;
  // When set, admin ops also need this peer pid (e.g. a serving worker's parent, the process
  // that supervises it): other processes of the admin uid are ordinary clients.
  std::optional<pid_t> admin_pid;
  // Fields the hello reply carries besides the broker's own (e.g. a worker's request limits).
  nlohmann::json hello_fields = nlohmann::json::object();
  // SIGTERM/SIGINT start a graceful shutdown, a second one forces it. Watched from the
  // Broker's construction on (they take effect once run() is called).
  bool handle_signals = true;
  // How long a graceful shutdown waits for pending replies before closing clients anyway.
  std::chrono::milliseconds shutdown_timeout{5'000};
  std::function<void(std::string_view)> log = log_to_stderr;  // null: silent
};

}  // namespace hearth::broker
