#include "gateway/worker_connection.h"

#include <sys/socket.h>

#include "gateway/openai_request.h"
#include "ipc/frame.h"
#include "ipc/protocol.h"
#include "ipc/serve_limits.h"
#include "ipc/unix_socket.h"

namespace hearth::gateway {

using json = nlohmann::json;

namespace {
// How long a submit or call waits for the worker's reply: it answers at once (submit is only
// queued), so this bounds a wedged worker, not a long generation.
constexpr auto kReplyTimeout = std::chrono::seconds(30);
}  // namespace

std::shared_ptr<WorkerConnection> WorkerConnection::connect(const std::string& socket_path) {
  UniqueFd socket = ipc::connect_unix(socket_path);
  ipc::send_frame(socket.get(),
                  ipc::make_request(ipc::op::kHello, 0, ipc::make_hello_args("hearth-gateway")));
  ipc::ReceiveOptions options;
  options.timeout = kReplyTimeout;
  std::optional<ipc::Frame> reply = ipc::receive_frame(socket.get(), options);
  if (!reply) throw ipc::ConnectionClosed("the worker at " + socket_path + " closed at hello");
  const ipc::ReplyStatus status = ipc::parse_reply_status(reply->body);
  if (!status.ok) throw ipc::ProtocolError(status.code, status.message);
  ipc::check_protocol_version(reply->body, "worker");
  // The worker's request frame limit (a larger frame would end the whole connection); a worker
  // that does not state one takes the broker's default.
  size_t max_request_bytes = ipc::kSubmitOverheadBytes;
  if (const auto it = reply->body.find("max_request_bytes");
      it != reply->body.end() && it->is_number_unsigned())
    max_request_bytes = it->get<size_t>();
  int64_t max_sequence_tokens = 0;
  if (const auto it = reply->body.find("max_sequence_tokens");
      it != reply->body.end() && it->is_number_unsigned())
    max_sequence_tokens = it->get<int64_t>();
  return std::shared_ptr<WorkerConnection>(
      new WorkerConnection(std::move(socket), max_request_bytes, max_sequence_tokens));
}

WorkerConnection::WorkerConnection(UniqueFd socket, size_t max_request_bytes,
                                   int64_t max_sequence_tokens)
    : socket_(std::move(socket)),
      max_request_bytes_(max_request_bytes),
      max_sequence_tokens_(max_sequence_tokens) {
  reader_ = std::thread([this] { read_loop(); });
}

WorkerConnection::~WorkerConnection() {
  // Wakes the reader (its receive returns end of stream), then waits for it. The last owner can
  // be a request's callback running on the reader itself (a session whose choices ended on a
  // connection nobody close()d): the reader touches no member after those callbacks, so it is
  // left to finish on its own. The pool closes every connection it made, so in the gateway this
  // never happens.
  ::shutdown(socket_.get(), SHUT_RDWR);
  std::lock_guard lock(close_mutex_);
  if (!reader_.joinable()) return;
  if (reader_.get_id() == std::this_thread::get_id())
    reader_.detach();
  else
    reader_.join();
}

void WorkerConnection::close() {
  ::shutdown(socket_.get(), SHUT_RDWR);
  std::lock_guard lock(close_mutex_);
  // From the reader (a callback) it cannot wait for itself; that is a caller's bug, and the
  // destructor's rule covers what follows.
  if (reader_.joinable() && reader_.get_id() != std::this_thread::get_id()) reader_.join();
}

void WorkerConnection::read_loop() {
  std::string why = "the worker closed the connection";
  // A request's callback can drop the last owner of this connection (a session that outlived
  // the pool): each frame is handled holding this alive, and once that hold was the last, the
  // destructor has run here (it detaches the reader) and nothing more may be touched.
  std::weak_ptr<WorkerConnection> alive;
  bool owned = false;  // by a shared_ptr (connect's); otherwise the owner joins the reader
  const auto gone = [&] { return owned && alive.expired(); };
  try {
    while (true) {
      std::optional<ipc::Frame> frame = ipc::receive_frame(socket_.get());
      if (!frame) break;
      {
        std::shared_ptr<WorkerConnection> self = weak_from_this().lock();
        alive = self;
        owned = self != nullptr;
        handle_frame(*frame, why);
      }
      if (gone()) return;
    }
  } catch (const std::exception& e) {
    if (gone()) return;
    why = std::string("the connection to the worker failed: ") + e.what();
  }
  fail_all(why);
}

// One frame from the worker: a call's reply, a cancel's, or the events poll's.
void WorkerConnection::handle_frame(ipc::Frame& frame, std::string& why) {
  const ipc::ReplyStatus status = ipc::parse_reply_status(frame.body);
  if (!status.id) {  // a connection-level error: the worker is about to close
    why = "the worker refused the connection: " + status.message;
    return;
  }
  bool events_reply = false;
  std::optional<std::string> refused_cancel;  // the request whose cancel the worker refused
  {
    std::lock_guard lock(mutex_);
    if (poll_id_ && *poll_id_ == *status.id) {
      events_reply = true;
      poll_id_.reset();
    } else if (auto it = replies_.find(*status.id); it != replies_.end()) {
      it->second = std::move(frame.body);
      replied_.notify_all();
    } else if (auto c = cancels_.find(*status.id); c != cancels_.end()) {
      if (!status.ok) refused_cancel = c->second;
      cancels_.erase(c);
    }
  }
  if (refused_cancel) {
    // Never swallowed: the request may still be running, so its caller hears of it.
    end_request(*refused_cancel, "the worker refused to cancel the request: " + status.message);
    return;
  }
  if (!events_reply) return;
  if (!status.ok) throw std::runtime_error("the worker refused to send events: " + status.message);
  if (const auto it = frame.body.find("stats"); it != frame.body.end() && it->is_object()) {
    // Kept before the events run their callbacks: a client that saw its request end then
    // reads stats at least as new as that end.
    std::lock_guard lock(mutex_);
    latest_stats_ = std::move(*it);
  }
  dispatch_events(frame.body.at("events"));
  std::lock_guard lock(mutex_);
  poll_events_locked();
}

void WorkerConnection::dispatch_events(const json& events) {
  for (const json& event : events) {
    const std::string id = event.value("id", "");
    const bool last = event.value("done", false);
    EventCallback callback;
    {
      std::lock_guard lock(mutex_);
      auto it = requests_.find(id);
      if (it == requests_.end()) continue;  // a request we already failed or never sent
      callback = last ? std::move(it->second) : it->second;
      if (last) requests_.erase(it);
    }
    callback(event);
  }
}

void WorkerConnection::end_request(const std::string& id, const std::string& why) {
  EventCallback callback;
  {
    std::lock_guard lock(mutex_);
    auto it = requests_.find(id);
    if (it == requests_.end()) return;  // it ended meanwhile
    callback = std::move(it->second);
    requests_.erase(it);
  }
  callback(json{{"id", id}, {"done", true}, {"stop", "error"}, {"error", why}});
}

void WorkerConnection::poll_events_locked() {
  if (poll_id_ || requests_.empty() || dead_) return;
  const uint64_t id = next_id_++;
  try {
    std::lock_guard write(write_mutex_);
    ipc::send_frame(socket_.get(), ipc::make_request(ipc::op::kEvents, id));
    poll_id_ = id;
  } catch (const std::exception&) {
    // The reader sees the broken connection and fails every request.
  }
}

void WorkerConnection::fail_all(const std::string& why) {
  std::map<std::string, EventCallback> orphans;
  {
    std::lock_guard lock(mutex_);
    dead_ = true;
    death_ = why;
    orphans.swap(requests_);
    replied_.notify_all();
  }
  for (auto& [id, callback] : orphans)
    callback(json{{"id", id}, {"done", true}, {"stop", "error"}, {"error", why}});
}

uint64_t WorkerConnection::send(const std::string& op, json args) {
  uint64_t id;
  {
    std::lock_guard lock(mutex_);
    if (dead_) throw ipc::ConnectionClosed(death_);
    id = next_id_++;
    replies_[id] = std::nullopt;
  }
  try {
    std::lock_guard write(write_mutex_);
    // Never more than the worker reads: a frame over its limit would cost the whole
    // connection (every request on it); encode_frame refuses it before a byte is sent.
    ipc::send_frame(socket_.get(), ipc::make_request(op, id, std::move(args)), {},
                    max_request_bytes_);
  } catch (...) {
    std::lock_guard lock(mutex_);
    replies_.erase(id);
    throw;
  }
  return id;
}

json WorkerConnection::wait_reply(uint64_t id) {
  std::unique_lock lock(mutex_);
  const bool answered =
      replied_.wait_for(lock, kReplyTimeout, [&] { return dead_ || replies_.at(id).has_value(); });
  std::optional<json> reply = std::move(replies_.at(id));
  replies_.erase(id);
  if (!reply) {
    if (!answered) throw ipc::TimeoutError("the worker did not answer within 30 s");
    throw ipc::ConnectionClosed(death_);
  }
  const ipc::ReplyStatus status = ipc::parse_reply_status(*reply);
  if (!status.ok) throw ipc::ProtocolError(status.code, status.message);
  return std::move(*reply);
}

void WorkerConnection::submit(const json& request, EventCallback on_event) {
  const std::string request_id = request.at("id").get<std::string>();
  json args = {{"request", request}};
  {
    // Registered before sending: the first event can arrive before the reply is read.
    std::lock_guard lock(mutex_);
    if (dead_) throw ipc::ConnectionClosed(death_);
    if (requests_.count(request_id))
      throw ipc::ProtocolError(ipc::ErrorCode::kBadRequest,
                               "request id " + request_id + " is already in flight");
    requests_[request_id] = std::move(on_event);
  }
  try {
    wait_reply(send(std::string(ipc::op::kSubmit), std::move(args)));
  } catch (...) {
    std::lock_guard lock(mutex_);
    requests_.erase(request_id);
    throw;
  }
  std::lock_guard lock(mutex_);
  poll_events_locked();
}

void WorkerConnection::cancel(const std::string& request_id) {
  try {
    // Not waited for: the request's last event says when it is gone. ("id" is the envelope's.)
    const uint64_t id = send(std::string(ipc::op::kCancel), json{{"request_id", request_id}});
    std::optional<json> reply;  // if the reader saw it already
    {
      std::lock_guard lock(mutex_);
      auto it = replies_.find(id);
      reply = std::move(it->second);
      replies_.erase(it);
      if (!reply) cancels_[id] = request_id;  // the reader takes it from there
    }
    if (reply) {
      const ipc::ReplyStatus status = ipc::parse_reply_status(*reply);
      if (!status.ok)
        end_request(request_id, "the worker refused to cancel the request: " + status.message);
    }
  } catch (const std::exception&) {
    // Dead or dying: fail_all ends the request.
  }
}

json WorkerConnection::call(const std::string& op, json args) {
  return wait_reply(send(op, std::move(args)));
}

json WorkerConnection::latest_stats() const {
  std::lock_guard lock(mutex_);
  return latest_stats_;
}

bool WorkerConnection::alive() const {
  std::lock_guard lock(mutex_);
  return !dead_;
}

size_t WorkerConnection::in_flight() const {
  std::lock_guard lock(mutex_);
  return requests_.size();
}

}  // namespace hearth::gateway
