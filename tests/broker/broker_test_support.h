#pragma once

// Running brokers and talking to them at the byte level, for the broker tests.

#include <signal.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../ipc/test_util.h"
#include "broker/broker.h"
#include "ipc/child_process.h"
#include "ipc/client.h"
#include "ipc/errors.h"
#include "ipc/frame.h"
#include "ipc/protocol.h"
#include "ipc/unix_socket.h"
#include "test_handler.h"

namespace hearth::test {

using namespace std::chrono_literals;

// Generous: only there so that a broken test fails instead of hanging.
inline constexpr std::chrono::milliseconds kPatience = 20s;

// A broker with the test handler, serving on its own thread in this process.
class InProcessBroker {
 public:
  explicit InProcessBroker(broker::BrokerOptions options = {})
      : broker_(prepare(options), handler_) {
    thread_ = std::thread([this] { broker_.run(); });
  }
  ~InProcessBroker() { stop(); }

  // Graceful shutdown; returns once run() has returned.
  void stop() {
    if (!thread_.joinable()) return;
    handler_.release_replies();
    broker_.shutdown();
    thread_.join();
  }
  // Waits for a shutdown that something else started.
  void join() {
    handler_.release_replies();
    thread_.join();
  }

  const std::string& path() const { return broker_.socket_path(); }
  TestHandler& handler() { return handler_; }
  broker::Broker& broker() { return broker_; }

  ipc::Client client(const std::string& name = "test-client") const {
    ipc::ClientOptions options;
    options.name = name;
    options.timeout = kPatience;
    return ipc::Client::connect(path(), options);
  }

  std::vector<std::string> logs() const {
    std::lock_guard lock(log_mutex_);
    return logs_;
  }
  // Whether a log line containing `needle` appears (soon: the broker may log after replying).
  bool logged(const std::string& needle) const {
    return eventually([&] {
      for (const std::string& line : logs()) {
        if (line.find(needle) != std::string::npos) return true;
      }
      return false;
    });
  }

 private:
  broker::BrokerOptions prepare(broker::BrokerOptions options) {
    if (options.socket_path.empty()) options.socket_path = tmp_ / "run/hearth.sock";
    options.handle_signals = false;
    options.log = [this](std::string_view line) {
      std::lock_guard lock(log_mutex_);
      logs_.emplace_back(line);
    };
    return options;
  }

  TempDir tmp_;
  mutable std::mutex log_mutex_;
  std::vector<std::string> logs_;
  TestHandler handler_;
  broker::Broker broker_;
  std::thread thread_;
};

// broker_test_helper as a child process, its stdout a pipe the test reads and its stderr this
// process's own (so what it logs shows up with the test's output).
inline ChildProcess start_helper(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {HEARTH_BINARY_DIR "/bin/broker_test_helper"};
  argv.insert(argv.end(), args.begin(), args.end());
  return ChildProcess::spawn(ChildProcess::Options(argv)
                                 .stdout_to(ChildProcess::Stream::pipe())
                                 .stderr_to(ChildProcess::Stream::inherit()));
}

// The next line the helper printed, or "" if none came in time.
inline std::string read_line(ChildProcess& helper) {
  return helper.stdout_pipe().read_line(std::chrono::steady_clock::now() + kPatience).value_or("");
}

// A raw connection for speaking (or not speaking) the protocol by hand.
inline UniqueFd raw_connect(const std::string& path) {
  return ipc::connect_unix(path);
}

inline void raw_hello(int socket) {
  ipc::send_frame(socket, ipc::make_request(ipc::op::kHello, 1, ipc::make_hello_args("raw")));
  ipc::ReceiveOptions options;
  options.timeout = kPatience;
  auto reply = ipc::receive_frame(socket, options);
  if (!reply || !reply->body.value("ok", false)) throw std::runtime_error("hello failed");
}

inline void write_all(int socket, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(socket, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server may already have hung up; that is what tests look at
    done += static_cast<std::size_t>(n);
  }
}

// What the server did with a connection that misbehaved: the error reply it sent (if any)
// and whether it then closed the connection.
struct Outcome {
  std::optional<ipc::ReplyStatus> error;
  bool closed = false;
};

inline Outcome outcome_of(int socket) {
  Outcome outcome;
  ipc::ReceiveOptions options;
  options.timeout = kPatience;
  for (;;) {
    try {
      auto frame = ipc::receive_frame(socket, options);
      if (!frame) {
        outcome.closed = true;
        return outcome;
      }
      const ipc::ReplyStatus status = ipc::parse_reply_status(frame->body);
      if (!status.ok) outcome.error = status;
    } catch (const ipc::TimeoutError&) {
      return outcome;
    } catch (const ipc::IpcError&) {
      outcome.closed = true;  // reset, or cut mid-frame
      return outcome;
    }
  }
}

inline std::string header(std::uint32_t n) {
  return std::string{static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                     static_cast<char>((n >> 16) & 0xff), static_cast<char>((n >> 24) & 0xff)};
}

}  // namespace hearth::test
