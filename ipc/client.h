#pragma once

#include <chrono>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/frame.h"
#include "ipc/protocol.h"
#include "base/unique_fd.h"

namespace hearth::ipc {

struct ClientOptions {
  std::string name = "hearth-client";  // sent in hello, shows up in the server's logs
  // How long one request may wait for its reply. A slow admin op (load) needs more.
  std::chrono::milliseconds timeout{30'000};
  std::size_t max_frame_bytes = kDefaultMaxFrameBytes;  // largest reply accepted
  // Who must be serving at the socket (SO_PEERCRED, checked before hello). Unset: this
  // process's own uid, root, or the owner of the socket's directory when only that owner can
  // write there; anyone else could have put a socket in the way.
  std::optional<uid_t> server_uid;
};

// Throws IpcError unless the peer of `socket` (connected to `path`) runs as a uid the client
// can trust, as ClientOptions::server_uid describes.
void check_server_uid(int socket, const std::string& path, std::optional<uid_t> expected);

// A blocking connection to a hearth server, as used by workers and tools: one request in flight
// at a time, replies matched by id, FDs attached to replies handed over. Not thread-safe. After
// a transport failure (timeout, closed connection, malformed reply) the client is closed; an
// error reply (ProtocolError) leaves it usable.
class Client {
 public:
  // Connects and says hello. Throws ServerNotRunning ("hearth server not running at PATH"),
  // ProtocolError (the server refused: unauthorized, busy, version_mismatch, ...) or IpcError.
  static Client connect(const std::string& socket_path, ClientOptions options = {});

  Client(Client&&) noexcept = default;
  Client& operator=(Client&&) noexcept = default;

  // Sends {op, id, ...args} and waits for the reply: its whole body and the FDs it carried.
  // Throws ProtocolError if the server replied ok:false, TimeoutError, ConnectionClosed or
  // IpcError.
  Frame call(std::string_view op, nlohmann::json args = nlohmann::json::object());

  // One FD per allocation of `model`, in the order asked for, fetched in batches of at most
  // kMaxFdsPerFrame. All or nothing: on failure the FDs already received are closed.
  std::vector<UniqueFd> import_allocations(std::string_view model,
                                           std::span<const std::uint64_t> allocations);

  // The server's hello reply: version, server name, this connection's client_id, admin.
  const nlohmann::json& server_hello() const { return hello_; }
  bool connected() const { return socket_.valid(); }
  int fd() const { return socket_.get(); }
  void close() { socket_.reset(); }

 private:
  Client(UniqueFd socket, ClientOptions options) noexcept;
  // Sends a request; if the server has already closed the connection, reports the error frame
  // it left behind (e.g. "unauthorized") rather than a bare EPIPE.
  void send_request(const nlohmann::json& request);
  Frame receive_reply(RequestId id);
  [[noreturn]] void fail_closed(const std::string& what);

  UniqueFd socket_;
  ClientOptions options_;
  RequestId next_id_ = 1;
  nlohmann::json hello_;
};

}  // namespace hearth::ipc
