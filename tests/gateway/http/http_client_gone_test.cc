// What a handler that waits long is told about its connection: a whole-body handler through
// Request::is_connection_closed, a streaming one through DataSink::client_gone. Both must say
// true once the client has left and once the server is stopping (no answer can reach anyone
// then), so the gateway cancels the generation instead of running it to its end, and stop()
// does not wait on it.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "gateway/http/server.h"
#include "tests/gateway/raw_http_client.h"

namespace hearth::http {
namespace {

using test::RawClient;

// How long a handler waits for its cue before giving up: far past anything the test needs, so
// a handler that returns without having seen it marks a failure, not a slow machine.
constexpr auto kHandlerPatience = std::chrono::seconds(60);

class HttpClientGone : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Post("/wait", [this](const Request& req, Response& res) {
      entered_.set_value();
      const auto give_up = std::chrono::steady_clock::now() + kHandlerPatience;
      while (std::chrono::steady_clock::now() < give_up) {
        if (req.is_connection_closed && req.is_connection_closed()) {
          saw_closed_ = true;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      res.set_content("late", "text/plain");
      left_.set_value();
    });
    server_.Get("/stream", [this](const Request&, Response& res) {
      res.set_chunked_content_provider("text/event-stream", [this](size_t, DataSink& sink) {
        const std::string first = "first";
        if (!sink.write(first.data(), first.size())) return false;
        entered_.set_value();
        const auto give_up = std::chrono::steady_clock::now() + kHandlerPatience;
        while (std::chrono::steady_clock::now() < give_up) {
          if (sink.client_gone()) {
            saw_closed_ = true;
            return false;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        sink.done();
        return true;
      });
    });
    port_ = server_.bind("127.0.0.1", 0);
    thread_ = std::thread([this] { server_.run(); });
  }
  void TearDown() override {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }
  void wait_entered() {
    ASSERT_EQ(entered_.get_future().wait_for(RawClient::kPatience), std::future_status::ready);
  }

  Server server_;
  std::thread thread_;
  int port_ = 0;
  std::promise<void> entered_;
  std::promise<void> left_;  // the whole-body handler returned
  std::atomic<bool> saw_closed_{false};
};

constexpr const char* kPost = "POST /wait HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}";

TEST_F(HttpClientGone, AWholeBodyHandlerSeesItsClientClose) {
  {
    RawClient c(port_);
    ASSERT_TRUE(c.send(kPost));
    wait_entered();
  }  // the client leaves while the handler waits
  // The handler returns on its own, the server still running.
  ASSERT_EQ(left_.get_future().wait_for(RawClient::kPatience), std::future_status::ready);
  EXPECT_TRUE(saw_closed_);
}

TEST_F(HttpClientGone, AWholeBodyHandlerSeesTheServerStop) {
  RawClient c(port_);
  ASSERT_TRUE(c.send(kPost));
  wait_entered();
  server_.stop();  // returns once the handler has (it polls is_connection_closed)
  thread_.join();
  EXPECT_TRUE(saw_closed_);
  EXPECT_TRUE(c.closed_by_server());
}

// The stream's check once asked the stop pipe for POLLRDHUP, which a pipe never reports: a
// stream waiting for tokens held stop() until its request's deadline.
TEST_F(HttpClientGone, AStreamWaitingForTokensSeesTheServerStop) {
  RawClient c(port_);
  ASSERT_TRUE(c.send("GET /stream HTTP/1.1\r\nHost: t\r\n\r\n"));
  wait_entered();
  server_.stop();
  thread_.join();
  EXPECT_TRUE(saw_closed_);
}

}  // namespace
}  // namespace hearth::http
