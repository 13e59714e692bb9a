#include "broker/connection.h"

#include <algorithm>
#include <array>
#include <utility>

#include "ipc/fd_passing.h"
#include "ipc/printable.h"

namespace hearth::broker {
namespace {

// Frames handled per readiness event before other clients get their turn.
constexpr int kMaxFramesPerWakeup = 16;

std::string describe(std::size_t n, const char* unit) {
  return std::to_string(n) + " " + unit;
}

}  // namespace

Connection::Connection(uv_loop_t* loop, UniqueFd socket, Session session, const Limits& limits,
                       Owner& owner)
    : socket_(std::move(socket)),
      loop_(loop),
      session_(std::move(session)),
      limits_(limits),
      owner_(owner),
      // Requests never carry FDs: any that arrive fail the frame and are closed on arrival.
      reader_(limits.max_frame_bytes, /*max_fds=*/0) {
  const int fd = socket_.get();
  poll_ = UvHandle<uv_poll_t>::make([&](uv_poll_t* h) { return uv_poll_init(loop, h, fd); }, this,
                                    "uv_poll_init");
  timer_ = UvHandle<uv_timer_t>::make([&](uv_timer_t* h) { return uv_timer_init(loop, h); }, this,
                                      "uv_timer_init");
}

void Connection::start() {
  accepted_at_ = last_progress_at_ = now();
  after_io(false);
}

void Connection::on_poll(int status, int events) {
  if (closed_) return;
  if (status < 0) {
    close(std::string("socket error: ") + uv_strerror(status), true);
    return;
  }
  bool progress = false;
  if (events & UV_WRITABLE) progress |= flush();
  if (!closed_ && (events & UV_READABLE) && reading()) progress |= read_frames();
  after_io(progress);
}

bool Connection::read_frames() {
  std::array<char, 64 * 1024> buffer;
  bool progress = false;
  int frames = 0;
  while (frames < kMaxFramesPerWakeup && reading()) {
    std::vector<UniqueFd> fds;
    // Never read past the current frame, so FDs are attributed to the frame they came with.
    const std::size_t want = std::min(reader_.bytes_wanted(), buffer.size());
    ipc::IoResult r;
    try {
      r = ipc::receive_with_fds(socket_.get(), std::span(buffer.data(), want), fds);
    } catch (const ipc::IpcError& e) {
      fail(std::nullopt, ipc::ErrorCode::kBadRequest, e.what());  // e.g. more than 250 FDs
      return progress;
    }
    if (r.status == ipc::IoStatus::kWouldBlock) break;
    if (r.status == ipc::IoStatus::kClosed) {
      if (reader_.mid_frame()) {
        // The client may only have shut down its sending side; tell it why nothing comes.
        fail(std::nullopt, ipc::ErrorCode::kBadRequest,
             "connection closed in the middle of a frame (truncated frame)");
      } else {
        close("client disconnected", false);
      }
      return progress;
    }
    progress = true;
    const bool was_mid_frame = reader_.mid_frame();
    if (!reader_.feed(std::span(buffer.data(), r.bytes), std::move(fds))) {
      fail(std::nullopt, reader_.error()->code, reader_.error()->message);
      return progress;
    }
    bool completed = false;
    while (auto frame = reader_.pop()) {
      ++frames;
      completed = true;
      owner_.on_frame(*this, std::move(*frame));
      if (closed_) return progress;
    }
    // A new frame's deadline runs from its first byte; bytes that follow do not extend it.
    if (reader_.mid_frame() && (!was_mid_frame || completed)) frame_started_at_ = now();
  }
  return progress;
}

bool Connection::flush() {
  bool progress = false;
  while (!out_.empty()) {
    OutFrame& frame = out_.front();
    std::vector<int> fds;
    if (frame.sent == 0) {
      for (const UniqueFd& fd : frame.fds) fds.push_back(fd.get());
    }
    ipc::IoResult r;
    try {
      r = ipc::send_with_fds(socket_.get(), std::span(frame.bytes).subspan(frame.sent), fds);
    } catch (const ipc::IpcError& e) {
      close(std::string("send failed: ") + e.what(), true);
      return progress;
    }
    if (r.status == ipc::IoStatus::kWouldBlock) break;
    if (r.status == ipc::IoStatus::kClosed) {
      close("client disconnected before reading its replies", false);
      return progress;
    }
    progress = true;
    if (frame.sent == 0) {
      // The kernel holds its own references now; ours are no longer needed.
      out_fds_ -= frame.fds.size();
      frame.fds.clear();
    }
    frame.sent += r.bytes;
    if (frame.sent == frame.bytes.size()) {
      out_bytes_ -= frame.bytes.size();
      out_.pop_front();
    }
  }
  return progress;
}

void Connection::send(std::string frame, std::vector<UniqueFd> fds) {
  if (closed_) return;  // `fds` close here
  // One frame is always accepted, so a single large reply can go out to a client that reads.
  if (!out_.empty() && (out_bytes_ + frame.size() > limits_.max_output_bytes ||
                        out_fds_ + fds.size() > limits_.max_output_fds)) {
    close("not reading its replies (" + describe(out_bytes_, "bytes") + " and " +
              describe(out_fds_, "descriptors") + " queued)",
          true);
    return;
  }
  if (out_.empty()) output_since_ = now();
  out_bytes_ += frame.size();
  out_fds_ += fds.size();
  out_.push_back(OutFrame{std::move(frame), 0, std::move(fds)});
  const bool progress = flush();
  after_io(progress);
}

void Connection::fail(std::optional<ipc::RequestId> id, ipc::ErrorCode code, std::string message) {
  if (closed_) return;
  std::string frame = ipc::encode_frame(ipc::make_error_reply(id, code, message));
  closing_ = true;
  closing_reason_ = std::string(ipc::to_string(code)) + ": " + ipc::printable(message, 512);
  closing_dropped_ = true;
  deferred_.clear();  // a broken connection does not wait for them; complete() will refuse
  if (out_.empty()) output_since_ = now();
  out_bytes_ += frame.size();
  out_.push_back(OutFrame{std::move(frame), 0, {}});
  const bool progress = flush();
  after_io(progress);
}

void Connection::finish(std::string reason) {
  if (closed_ || closing_) return;
  closing_ = true;
  closing_reason_ = std::move(reason);
  closing_dropped_ = false;
  after_io(false);
}

void Connection::close(std::string_view reason, bool dropped) {
  if (closed_) return;
  closed_ = true;
  // libuv requires the poll handle to be closed before the descriptor.
  poll_.reset();
  timer_.reset();
  socket_.reset();
  out_.clear();  // closes FDs of replies that never went out
  deferred_.clear();
  owner_.on_closed(*this, reason, dropped);
}

void Connection::after_io(bool progress) {
  if (closed_) return;
  if (closing_ && out_.empty() && deferred_.empty()) {
    close(closing_reason_, closing_dropped_);
    return;
  }

  const int events = (reading() ? UV_READABLE : 0) | (out_.empty() ? 0 : UV_WRITABLE);
  if (events != poll_events_) {
    const int rc = events != 0
                       ? uv_poll_start(poll_.get(), events,
                                       [](uv_poll_t* h, int status, int ev) {
                                         static_cast<Connection*>(h->data)->on_poll(status, ev);
                                       })
                       : uv_poll_stop(poll_.get());
    if (rc < 0) {
      close(std::string("uv_poll_start: ") + uv_strerror(rc), true);
      return;
    }
    poll_events_ = events;
  }

  if (progress) last_progress_at_ = now();
  const std::optional<std::uint64_t> deadline = next_deadline(nullptr);
  if (deadline == armed_deadline_) return;
  armed_deadline_ = deadline;
  if (!deadline) {
    uv_timer_stop(timer_.get());
    return;
  }
  const std::uint64_t t = now();
  uv_timer_start(
      timer_.get(), [](uv_timer_t* h) { static_cast<Connection*>(h->data)->on_deadline(); },
      *deadline > t ? *deadline - t : 0, 0);
}

bool Connection::quiet() const {
  return greeted_ && reading() && !reader_.mid_frame() && deferred_.empty() &&
         !session_.holds_lease();
}

std::optional<std::uint64_t> Connection::next_deadline(std::string* why) const {
  if (closed_) return std::nullopt;
  const auto frame_ms = static_cast<std::uint64_t>(limits_.idle_timeout.count());
  const auto quiet_ms = static_cast<std::uint64_t>(limits_.quiet_timeout.count());
  std::optional<std::uint64_t> earliest;
  auto consider = [&](std::uint64_t at, auto&& reason) {
    if (earliest && *earliest <= at) return;
    earliest = at;
    if (why) *why = reason();
  };
  auto within = [](const char* what, std::uint64_t ms) {
    return std::string(what) + " within " + std::to_string(ms) + " ms";
  };
  // While the broker holds back (replies queued, or closing), the client is not to blame for
  // an unfinished hello or frame; the reply deadline applies instead.
  if (reading() && !greeted_)
    consider(accepted_at_ + frame_ms, [&] { return within("sent no hello", frame_ms); });
  if (reading() && reader_.mid_frame())
    consider(frame_started_at_ + frame_ms,
             [&] { return within("did not finish the frame it started", frame_ms); });
  if (!out_.empty())
    consider(output_since_ + frame_ms, [&] {
      return "not reading its replies: still unread after " + std::to_string(frame_ms) + " ms";
    });
  if (quiet())
    consider(last_progress_at_ + quiet_ms, [&] {
      return "idle for " + std::to_string(quiet_ms) + " ms without holding a lease";
    });
  return earliest;
}

void Connection::on_deadline() {
  armed_deadline_.reset();
  if (closed_) return;
  std::string why;
  const std::optional<std::uint64_t> deadline = next_deadline(&why);
  if (!deadline || *deadline > now()) {
    after_io(false);  // what the client owed changed since the timer was set: re-arm
    return;
  }
  if (out_.empty()) {
    // Best effort: the socket has room, since nothing of ours is waiting in it.
    const std::string frame =
        ipc::encode_frame(ipc::make_error_reply(std::nullopt, ipc::ErrorCode::kTimeout, why));
    try {
      ipc::send_with_fds(socket_.get(), frame, {});
    } catch (const ipc::IpcError&) {
    }
  }
  close(why, true);
}

}  // namespace hearth::broker
