#pragma once

#include <uv.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "broker/broker_options.h"
#include "broker/connection.h"
#include "broker/event_loop.h"
#include "broker/handler.h"
#include "broker/reply.h"
#include "broker/session.h"
#include "broker/uv_handle.h"
#include "ipc/unix_socket.h"

namespace hearth::broker {

struct BrokerStats {
  std::size_t clients = 0;              // connected now
  std::uint64_t connections_total = 0;  // admitted since start
  std::uint64_t refused_total = 0;      // refused at accept (uid not allowed, too many clients)
  std::uint64_t dropped_total = 0;      // closed by the broker: bad frame, stall, slow reader
  std::uint64_t requests_total = 0;
  std::chrono::steady_clock::duration uptime{};

  nlohmann::json to_json() const;
};

// Serves the hearth protocol to many clients at once on one libuv loop thread. It checks each
// peer's uid at accept, frames and parses requests, enforces the limits in BrokerOptions,
// answers hello and shutdown itself, and passes every other request to a Handler. It knows
// nothing of models or GPUs.
class Broker : private Connection::Owner {
 public:
  // Binds the socket (ipc::UnixListener::listen): throws ipc::IpcError if a live server holds
  // it or the directory is unsafe. Serving starts with run().
  Broker(BrokerOptions options, Handler& handler);
  ~Broker();
  Broker(const Broker&) = delete;
  Broker& operator=(const Broker&) = delete;

  // Serves until a graceful shutdown completes (SIGTERM/SIGINT when handle_signals, an admin
  // "shutdown" request, or shutdown()): stop accepting and remove the socket, stop reading,
  // write pending replies (deferred ones included, up to shutdown_timeout), close every client.
  // Call once; the calling thread becomes the loop thread.
  void run();

  // Thread-safe: starts a graceful shutdown.
  void shutdown();
  // Thread-safe: runs `fn` on the loop thread. Returns false, dropping `fn`, once stopped.
  bool post(std::function<void()> fn);

  // Loop thread only: answers a request the handler deferred. Returns false if the client is
  // gone or the request was not deferred; the reply (and its FDs) is then discarded.
  bool complete(ClientId client, ipc::RequestId request, Reply reply);

  // Loop thread only.
  BrokerStats stats() const;
  const BrokerOptions& options() const { return options_; }
  const std::string& socket_path() const { return options_.socket_path; }

 private:
  enum class State { kServing, kDraining, kStopped };

  void on_frame(Connection& connection, ipc::Frame frame) override;
  void on_closed(Connection& connection, std::string_view reason, bool dropped) override;

  void on_listener_readable();
  void admit(UniqueFd socket);
  void refuse(const UniqueFd& socket, ipc::ErrorCode code, const std::string& message);
  void pause_accepting();
  void greet(Connection& connection, const ipc::Request& request);
  void send_reply(Connection& connection, ipc::RequestId id, Reply reply);
  void reap();
  void begin_shutdown(const std::string& reason, bool force_if_draining);
  void close_all(const std::string& reason);
  void maybe_stop();
  void run_posted();
  bool uid_allowed(uid_t uid) const;
  bool is_admin(const ipc::PeerCredentials& peer) const;
  std::string admin_description() const;  // who may call admin ops, for refusals
  std::string describe(const Session& session) const;
  void log(const std::string& line) const;

  BrokerOptions options_;
  Handler& handler_;
  uid_t admin_uid_;
  std::vector<uid_t> allowed_uids_;
  // Bound before the loop exists and destroyed after it, so the socket file disappears last.
  ipc::UnixListener listener_;
  EventLoop loop_;
  UvHandle<uv_poll_t> listen_poll_;
  UvHandle<uv_timer_t> accept_retry_;
  UvHandle<uv_signal_t> sigterm_;
  UvHandle<uv_signal_t> sigint_;
  UvHandle<uv_async_t> wakeup_;
  UvHandle<uv_timer_t> shutdown_timer_;
  UvHandle<uv_check_t> reaper_;
  std::map<ClientId, std::unique_ptr<Connection>> connections_;
  std::map<uid_t, std::size_t> clients_per_uid_;  // connections_ counted by peer uid
  // Closed connections. `reaper_` (a check handle: after each round of I/O callbacks) tells the
  // handler they are gone and frees them.
  std::vector<std::unique_ptr<Connection>> retired_;

  std::mutex posted_mutex_;
  std::vector<std::function<void()>> posted_;
  bool accepting_posts_ = true;

  State state_ = State::kServing;
  bool ran_ = false;
  ClientId next_client_id_ = 1;
  BrokerStats stats_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace hearth::broker
