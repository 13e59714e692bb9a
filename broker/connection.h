#pragma once

#include <uv.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "broker/session.h"
#include "broker/uv_handle.h"
#include "ipc/errors.h"
#include "ipc/frame.h"
#include "ipc/frame_reader.h"
#include "ipc/protocol.h"
#include "base/unique_fd.h"

namespace hearth::broker {

// Internal to the broker: one client's socket on the event loop. It reads a frame at a time,
// queues encoded replies and writes them as the socket drains, stops reading while replies back
// up, and drops a client that misses a deadline: its hello, each frame and each batch of replies
// must be done within idle_timeout, and a greeted client that holds no lease must not sit quiet
// longer than quiet_timeout.
class Connection {
 public:
  // Receives what a Connection has to report; implemented by the Broker.
  class Owner {
   public:
    virtual void on_frame(Connection& connection, ipc::Frame frame) = 0;
    // The socket is closed. The owner may destroy the Connection once the current libuv
    // callback has returned, not before.
    virtual void on_closed(Connection& connection, std::string_view reason, bool dropped) = 0;

   protected:
    ~Owner() = default;
  };

  struct Limits {
    std::size_t max_frame_bytes;
    std::size_t max_output_bytes;
    std::size_t max_output_fds;
    std::chrono::milliseconds idle_timeout;   // hello, one frame, one batch of replies
    std::chrono::milliseconds quiet_timeout;  // greeted, nothing in flight, no lease
  };

  Connection(uv_loop_t* loop, UniqueFd socket, Session session, const Limits& limits, Owner& owner);
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  Session& session() { return session_; }
  bool closed() const { return closed_; }
  bool greeted() const { return greeted_; }
  void set_greeted() { greeted_ = true; }

  // Starts watching the socket and the deadlines.
  void start();
  // Queues one encoded frame and its FDs. Drops the client if its queue is over the limits.
  void send(std::string frame, std::vector<UniqueFd> fds);
  // Queues a final error reply, stops reading, and closes once it is written.
  void fail(std::optional<ipc::RequestId> id, ipc::ErrorCode code, std::string message);
  // Stops reading; closes once queued replies are written and deferred ones are answered.
  void finish(std::string reason);
  // Closes now. `dropped`: the broker ended it (counted and logged), not the client.
  void close(std::string_view reason, bool dropped);

  // Book-keeping for replies that Broker::complete delivers later.
  void defer(ipc::RequestId id) { deferred_.insert(id); }
  bool settle(ipc::RequestId id) { return deferred_.erase(id) > 0; }

 private:
  struct OutFrame {
    std::string bytes;
    std::size_t sent = 0;
    std::vector<UniqueFd> fds;  // released to the kernel with the frame's first byte
  };

  void on_poll(int status, int events);
  void on_deadline();
  bool read_frames();
  bool flush();
  // Re-arms the poll mask and the deadline timer after I/O, and closes a finished connection.
  void after_io(bool progress);
  bool reading() const { return !closing_ && out_.empty(); }
  // Greeted, nothing in flight either way, no lease: the quiet deadline runs.
  bool quiet() const;
  // The earliest deadline that applies now (loop time, ms) and, if `why` is given, what the
  // client failed to do by then.
  std::optional<std::uint64_t> next_deadline(std::string* why) const;
  std::uint64_t now() const { return uv_now(loop_); }

  // Declared before the handles: the handles are closed first, then the descriptor.
  UniqueFd socket_;
  uv_loop_t* loop_;
  Session session_;
  Limits limits_;
  Owner& owner_;
  ipc::FrameReader reader_;
  std::deque<OutFrame> out_;
  std::size_t out_bytes_ = 0;
  std::size_t out_fds_ = 0;
  std::unordered_set<ipc::RequestId> deferred_;
  bool greeted_ = false;
  bool closing_ = false;
  bool closed_ = false;
  std::string closing_reason_;
  bool closing_dropped_ = false;
  int poll_events_ = 0;
  // Loop times (ms): when the connection was accepted, when the frame being read began, since
  // when replies have been waiting, and the last progress in either direction.
  std::uint64_t accepted_at_ = 0;
  std::uint64_t frame_started_at_ = 0;
  std::uint64_t output_since_ = 0;
  std::uint64_t last_progress_at_ = 0;
  std::optional<std::uint64_t> armed_deadline_;
  UvHandle<uv_poll_t> poll_;
  UvHandle<uv_timer_t> timer_;
};

}  // namespace hearth::broker
