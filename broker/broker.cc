#include "broker/broker.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <stdexcept>
#include <utility>

#include "ipc/errors.h"
#include "ipc/fd_passing.h"
#include "ipc/frame.h"
#include "ipc/peer_credentials.h"
#include "ipc/printable.h"
#include "ipc/protocol.h"

namespace hearth::broker {
namespace {

// Connections accepted per readiness event before clients already connected get their turn.
constexpr int kMaxAcceptsPerWakeup = 64;
// After accept fails (usually out of descriptors), wait this long before trying again rather
// than spinning on a listening socket that stays readable.
constexpr std::uint64_t kAcceptRetryMs = 100;

}  // namespace

nlohmann::json BrokerStats::to_json() const {
  return {{"clients", clients},
          {"connections_total", connections_total},
          {"refused_total", refused_total},
          {"dropped_total", dropped_total},
          {"requests_total", requests_total},
          {"uptime_s", std::chrono::duration<double>(uptime).count()}};
}

Broker::Broker(BrokerOptions options, Handler& handler)
    : options_(std::move(options)),
      handler_(handler),
      admin_uid_(options_.admin_uid.value_or(::geteuid())),
      allowed_uids_(options_.allowed_uids.empty() ? std::vector<uid_t>{::geteuid()}
                                                  : options_.allowed_uids),
      listener_(ipc::UnixListener::listen(options_.socket_path, options_.listen)) {
  uv_loop_t* loop = loop_.get();
  const int listen_fd = listener_.fd();
  listen_poll_ = UvHandle<uv_poll_t>::make(
      [&](uv_poll_t* h) { return uv_poll_init(loop, h, listen_fd); }, this, "uv_poll_init");
  accept_retry_ = UvHandle<uv_timer_t>::make([&](uv_timer_t* h) { return uv_timer_init(loop, h); },
                                             this, "uv_timer_init");
  shutdown_timer_ = UvHandle<uv_timer_t>::make(
      [&](uv_timer_t* h) { return uv_timer_init(loop, h); }, this, "uv_timer_init");
  reaper_ = UvHandle<uv_check_t>::make([&](uv_check_t* h) { return uv_check_init(loop, h); }, this,
                                       "uv_check_init");
  wakeup_ = UvHandle<uv_async_t>::make(
      [&](uv_async_t* h) {
        return uv_async_init(loop, h,
                             [](uv_async_t* a) { static_cast<Broker*>(a->data)->run_posted(); });
      },
      this, "uv_async_init");
  if (options_.handle_signals) {
    sigterm_ = UvHandle<uv_signal_t>::make([&](uv_signal_t* h) { return uv_signal_init(loop, h); },
                                           this, "uv_signal_init");
    sigint_ = UvHandle<uv_signal_t>::make([&](uv_signal_t* h) { return uv_signal_init(loop, h); },
                                          this, "uv_signal_init");
    // Watched from here rather than from run(): a signal that arrives in between is handled
    // once the loop runs, instead of killing the process with the socket left behind.
    auto on_signal = [](uv_signal_t* h, int signum) {
      static_cast<Broker*>(h->data)->begin_shutdown(signum == SIGTERM ? "SIGTERM" : "SIGINT",
                                                    /*force_if_draining=*/true);
    };
    check_uv(uv_signal_start(sigterm_.get(), on_signal, SIGTERM), "uv_signal_start");
    check_uv(uv_signal_start(sigint_.get(), on_signal, SIGINT), "uv_signal_start");
  }
}

Broker::~Broker() = default;

void Broker::run() {
  if (ran_) throw std::logic_error("Broker::run may be called only once");
  ran_ = true;
  started_ = std::chrono::steady_clock::now();

  auto on_listen = [](uv_poll_t* h, int status, int) {
    auto* self = static_cast<Broker*>(h->data);
    if (status < 0) {
      self->log(std::string("listening socket error: ") + uv_strerror(status));
      self->pause_accepting();
      return;
    }
    self->on_listener_readable();
  };
  check_uv(uv_poll_start(listen_poll_.get(), UV_READABLE, on_listen), "uv_poll_start");
  check_uv(
      uv_check_start(reaper_.get(), [](uv_check_t* h) { static_cast<Broker*>(h->data)->reap(); }),
      "uv_check_start");
  // The reaper only cleans up; it must not keep the loop alive.
  uv_unref(reinterpret_cast<uv_handle_t*>(reaper_.get()));

  uv_run(loop_.get(), UV_RUN_DEFAULT);
  reap();
}

void Broker::shutdown() {
  post([this] { begin_shutdown("shutdown requested", /*force_if_draining=*/false); });
}

bool Broker::post(std::function<void()> fn) {
  std::lock_guard lock(posted_mutex_);
  if (!accepting_posts_) return false;
  posted_.push_back(std::move(fn));
  // Under the lock: maybe_stop() closes the async handle only after clearing accepting_posts_.
  uv_async_send(wakeup_.get());
  return true;
}

void Broker::run_posted() {
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard lock(posted_mutex_);
    batch.swap(posted_);
  }
  for (auto& fn : batch) {
    try {
      fn();
    } catch (const std::exception& e) {
      log(std::string("posted task failed: ") + e.what());
    }
  }
}

bool Broker::complete(ClientId client, ipc::RequestId request, Reply reply) {
  const auto it = connections_.find(client);
  if (it == connections_.end() || it->second->closed()) return false;
  Connection& connection = *it->second;
  if (!connection.settle(request)) {
    log("complete(): request " + std::to_string(request) + " of " + describe(connection.session()) +
        " is not waiting for a deferred reply");
    return false;
  }
  if (reply.kind == Reply::Kind::kDeferred) {
    reply = Reply::error(ipc::ErrorCode::kInternal, "the server deferred a reply twice");
  }
  send_reply(connection, request, std::move(reply));
  return true;
}

BrokerStats Broker::stats() const {
  BrokerStats s = stats_;
  s.clients = connections_.size();
  s.uptime = std::chrono::steady_clock::now() - started_;
  return s;
}

void Broker::on_listener_readable() {
  for (int i = 0; i < kMaxAcceptsPerWakeup && state_ == State::kServing; ++i) {
    UniqueFd socket;
    try {
      socket = listener_.accept();
    } catch (const ipc::IpcError& e) {
      log(std::string(e.what()) + "; pausing accepts for " + std::to_string(kAcceptRetryMs) +
          " ms");
      pause_accepting();
      return;
    }
    if (!socket) return;
    admit(std::move(socket));
  }
}

void Broker::pause_accepting() {
  uv_poll_stop(listen_poll_.get());
  uv_timer_start(
      accept_retry_.get(),
      [](uv_timer_t* h) {
        auto* self = static_cast<Broker*>(h->data);
        if (self->state_ != State::kServing) return;
        uv_poll_start(self->listen_poll_.get(), UV_READABLE, [](uv_poll_t* p, int status, int) {
          auto* broker = static_cast<Broker*>(p->data);
          if (status < 0) {
            broker->pause_accepting();
            return;
          }
          broker->on_listener_readable();
        });
      },
      kAcceptRetryMs, 0);
}

void Broker::admit(UniqueFd socket) {
  ipc::PeerCredentials peer;
  try {
    peer = ipc::peer_credentials(socket.get());
  } catch (const ipc::IpcError& e) {
    log(std::string("refused a connection: ") + e.what());
    return;
  }
  const std::string who =
      "pid " + std::to_string(peer.pid) + " (uid " + std::to_string(peer.uid) + ")";
  if (!uid_allowed(peer.uid)) {
    log("refused " + who + ": uid not in the allow list");
    refuse(socket, ipc::ErrorCode::kUnauthorized,
           "uid " + std::to_string(peer.uid) + " is not allowed to use this server");
    return;
  }
  if (connections_.size() >= options_.max_clients) {
    log("refused " + who + ": " + std::to_string(options_.max_clients) + " clients connected");
    refuse(
        socket, ipc::ErrorCode::kBusy,
        "too many clients (at most " + std::to_string(options_.max_clients) + "); try again later");
    return;
  }
  const auto held = clients_per_uid_.find(peer.uid);
  if (peer.uid != admin_uid_ && held != clients_per_uid_.end() &&
      held->second >= options_.max_clients_per_uid) {
    const std::string limit = std::to_string(options_.max_clients_per_uid);
    log("refused " + who + ": its uid already has " + limit + " connections");
    refuse(socket, ipc::ErrorCode::kBusy,
           "uid " + std::to_string(peer.uid) + " already has " + limit +
               " connections to this server (at most " + limit + " per uid); try again later");
    return;
  }

  const ClientId id = next_client_id_++;
  const Connection::Limits limits{options_.max_request_bytes, options_.max_output_bytes,
                                  options_.max_output_fds, options_.idle_timeout,
                                  options_.quiet_timeout};
  std::unique_ptr<Connection> owned;
  try {
    owned = std::make_unique<Connection>(loop_.get(), std::move(socket),
                                         Session(*this, id, peer, is_admin(peer)), limits,
                                         static_cast<Connection::Owner&>(*this));
  } catch (const std::exception& e) {
    log("could not set up a connection for " + who + ": " + e.what());
    return;
  }
  Connection& connection = *owned;
  connections_.emplace(id, std::move(owned));
  ++clients_per_uid_[peer.uid];
  ++stats_.connections_total;
  try {
    handler_.on_connect(connection.session());
  } catch (const std::exception& e) {
    connection.close(std::string("on_connect failed: ") + e.what(), true);
    return;
  }
  connection.start();
}

void Broker::refuse(const UniqueFd& socket, ipc::ErrorCode code, const std::string& message) {
  ++stats_.refused_total;
  // A fresh socket's buffer has room for one small frame, so this does not block; if it fails
  // the client still sees the connection close.
  try {
    ipc::send_with_fds(socket.get(),
                       ipc::encode_frame(ipc::make_error_reply(std::nullopt, code, message)), {});
  } catch (const ipc::IpcError&) {
  }
}

void Broker::on_frame(Connection& connection, ipc::Frame frame) {
  ++stats_.requests_total;
  const std::optional<ipc::RequestId> id = ipc::request_id_of(frame.body);
  ipc::Request request;
  try {
    request = ipc::parse_request(std::move(frame.body));
  } catch (const ipc::ProtocolError& e) {
    connection.fail(id, e.code(), e.message());
    return;
  }
  Session& session = connection.session();

  if (request.op == ipc::op::kHello) {
    greet(connection, request);
    return;
  }
  if (!connection.greeted()) {
    connection.fail(request.id, ipc::ErrorCode::kBadRequest, "the first request must be hello");
    return;
  }
  if (!ipc::is_known_op(request.op)) {
    send_reply(connection, request.id,
               Reply::error(ipc::ErrorCode::kUnknownOp,
                            "unknown op '" + ipc::printable(request.op, 64) + "'"));
    return;
  }
  if (ipc::is_admin_op(request.op) && !session.is_admin()) {
    send_reply(
        connection, request.id,
        Reply::error(ipc::ErrorCode::kUnauthorized,
                     "'" + request.op + "' is an admin operation: only " + admin_description() +
                         " may call it (you are uid " + std::to_string(session.uid()) + ", pid " +
                         std::to_string(session.pid()) + ")"));
    return;
  }
  if (request.op == ipc::op::kShutdown) {
    send_reply(connection, request.id, Reply::ok({{"stopping", true}}));
    begin_shutdown("shutdown requested by " + describe(session), /*force_if_draining=*/false);
    return;
  }

  Reply reply;
  try {
    reply = handler_.handle(session, request);
  } catch (const ipc::ProtocolError& e) {
    reply = Reply::error(e.code(), e.message());
  } catch (const std::exception& e) {
    log("handler failed on '" + request.op + "' from " + describe(session) + ": " + e.what());
    reply = Reply::error(ipc::ErrorCode::kInternal, e.what());
  }
  send_reply(connection, request.id, std::move(reply));
}

void Broker::greet(Connection& connection, const ipc::Request& request) {
  Session& session = connection.session();
  try {
    ipc::check_protocol_version(request.body, "client");
    session.client_name_ =
        ipc::printable(ipc::optional_string_field(request.body, "client").value_or(""), 128);
  } catch (const ipc::ProtocolError& e) {
    connection.fail(request.id, e.code(), e.message());
    return;
  }
  connection.set_greeted();
  nlohmann::json fields = options_.hello_fields;
  fields.update({{"version", ipc::kProtocolVersion},
                 {"server", options_.server_name},
                 {"client_id", session.id()},
                 {"admin", session.is_admin()}});
  send_reply(connection, request.id, Reply::ok(std::move(fields)));
}

void Broker::send_reply(Connection& connection, ipc::RequestId id, Reply reply) {
  if (connection.closed()) return;
  if (reply.kind == Reply::Kind::kDeferred) {
    connection.defer(id);
    return;
  }
  std::string frame;
  try {
    if (reply.kind == Reply::Kind::kError) {
      reply.fds.clear();
      frame = ipc::encode_frame(ipc::make_error_reply(id, reply.error_code, reply.error_message),
                                options_.max_reply_bytes);
    } else {
      if (reply.fds.size() > ipc::kMaxFdsPerFrame) {
        throw ipc::IpcError("the reply carries " + std::to_string(reply.fds.size()) +
                            " descriptors (at most " + std::to_string(ipc::kMaxFdsPerFrame) +
                            " per frame)");
      }
      frame = ipc::encode_frame(ipc::make_ok_reply(id, std::move(reply.fields)),
                                options_.max_reply_bytes);
    }
  } catch (const ipc::IpcError& e) {
    log("cannot send the reply to request " + std::to_string(id) + " of " +
        describe(connection.session()) + ": " + e.what());
    reply.fds.clear();
    frame = ipc::encode_frame(ipc::make_error_reply(
        id, ipc::ErrorCode::kInternal,
        std::string("the server could not encode its reply: ") + ipc::printable(e.what(), 256)));
  }
  connection.send(std::move(frame), std::move(reply.fds));
}

void Broker::on_closed(Connection& connection, std::string_view reason, bool dropped) {
  Session& session = connection.session();
  if (dropped) {
    ++stats_.dropped_total;
    log(describe(session) + " dropped: " + std::string(reason));
  }
  auto node = connections_.extract(session.id());
  if (node.empty()) return;
  if (const auto it = clients_per_uid_.find(session.uid()); it != clients_per_uid_.end())
    if (--it->second == 0) clients_per_uid_.erase(it);
  retired_.push_back(std::move(node.mapped()));
}

void Broker::reap() {
  // on_disconnect runs here, at the top of a loop iteration, rather than inside whatever closed
  // the connection (which may be the handler's own call to complete()): handler callbacks never
  // nest, so a handler may hold its own lock while it calls into the broker.
  while (!retired_.empty()) {
    std::vector<std::unique_ptr<Connection>> batch;
    batch.swap(retired_);
    for (const auto& connection : batch) {
      try {
        handler_.on_disconnect(connection->session());
      } catch (const std::exception& e) {
        log("on_disconnect failed for " + describe(connection->session()) + ": " + e.what());
      }
    }
  }
  maybe_stop();
}

void Broker::begin_shutdown(const std::string& reason, bool force_if_draining) {
  if (state_ == State::kStopped) return;
  if (state_ == State::kDraining) {
    if (force_if_draining) close_all(reason + " again: closing every client now");
    return;
  }
  state_ = State::kDraining;
  log("shutting down: " + reason);
  // Stop accepting first, so that new clients get "not running" instead of a silent backlog.
  listen_poll_.reset();
  accept_retry_.reset();
  listener_.close();
  uv_timer_start(
      shutdown_timer_.get(),
      [](uv_timer_t* h) {
        static_cast<Broker*>(h->data)->close_all("shutdown timeout: replies still pending");
      },
      static_cast<std::uint64_t>(options_.shutdown_timeout.count()), 0);

  std::vector<ClientId> ids;
  for (const auto& [id, connection] : connections_) ids.push_back(id);
  for (ClientId id : ids) {
    if (const auto it = connections_.find(id); it != connections_.end()) {
      it->second->finish("server shutting down");
    }
  }
  maybe_stop();
}

void Broker::close_all(const std::string& reason) {
  std::vector<ClientId> ids;
  for (const auto& [id, connection] : connections_) ids.push_back(id);
  for (ClientId id : ids) {
    if (const auto it = connections_.find(id); it != connections_.end()) {
      it->second->close(reason, true);
    }
  }
}

void Broker::maybe_stop() {
  if (state_ != State::kDraining || !connections_.empty() || !retired_.empty()) return;
  state_ = State::kStopped;
  std::vector<std::function<void()>> last;
  {
    std::lock_guard lock(posted_mutex_);
    accepting_posts_ = false;
    last.swap(posted_);
  }
  // Whatever was posted before the stop still runs (a completion then finds no client).
  for (auto& fn : last) {
    try {
      fn();
    } catch (const std::exception& e) {
      log(std::string("posted task failed: ") + e.what());
    }
  }
  // With every handle closed, uv_run returns.
  wakeup_.reset();
  sigterm_.reset();
  sigint_.reset();
  shutdown_timer_.reset();
  reaper_.reset();
  log("stopped");
}

std::string Broker::admin_description() const {
  if (options_.admin_pid)
    return "process " + std::to_string(*options_.admin_pid) + " (uid " +
           std::to_string(admin_uid_) + ")";
  return "uid " + std::to_string(admin_uid_);
}

bool Broker::is_admin(const ipc::PeerCredentials& peer) const {
  return peer.uid == admin_uid_ && (!options_.admin_pid || peer.pid == *options_.admin_pid);
}

bool Broker::uid_allowed(uid_t uid) const {
  return std::find(allowed_uids_.begin(), allowed_uids_.end(), uid) != allowed_uids_.end();
}

std::string Broker::describe(const Session& session) const {
  std::string text = "client " + std::to_string(session.id()) + " (pid " +
                     std::to_string(session.pid()) + ", uid " + std::to_string(session.uid());
  if (!session.client_name().empty()) text += ", " + session.client_name();
  return text + ")";
}

void Broker::log(const std::string& line) const {
  // Lines quote what clients sent (names, ops, bad bytes): one line each, nothing raw.
  if (options_.log) options_.log(ipc::printable(line));
}

}  // namespace hearth::broker
