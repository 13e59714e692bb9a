// hearth's HTTP/1.1 server over real sockets on 127.0.0.1: pipelining, keep-alive and HTTP/1.0,
// 100-continue, the limits (413 for chunked bodies without reading them, 431, slowloris 408),
// routing (404, 405 with Allow), streaming chunk by chunk and a client that leaves mid-stream,
// malformed requests refused while the server keeps serving everyone else.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "gateway/http/server.h"
#include "tests/gateway/raw_http_client.h"

namespace hearth::http {
namespace {

using test::RawClient;
using test::RawReply;

class HttpServer : public ::testing::Test {
 protected:
  void start(ServerOptions options = {}) {
    server_ = std::make_unique<Server>(options);
    server_->Get("/hello",
                 [](const Request&, Response& res) { res.set_content("hi", "text/plain"); });
    server_->Get("/echo", [](const Request& req, Response& res) {
      res.set_content(req.query, "text/plain");
    });
    server_->Post("/echo", [this](const Request& req, Response& res) {
      ++posts_;
      res.set_content(req.body, "application/octet-stream");
    });
    server_->Get("/throw", [](const Request&, Response&) { throw std::runtime_error("boom"); });
    routes();
    server_->set_exception_handler([](const Request&, Response& res, std::exception_ptr ep) {
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        res.status = 500;
        res.set_content(std::string("caught: ") + e.what(), "text/plain");
      }
    });
    server_->set_error_handler([](const Request&, Response& res) {
      if (res.body.empty())
        res.set_content("{\"error\":\"" + res.error_message + "\"}", "application/json");
    });
    port_ = server_->bind("127.0.0.1", 0);
    thread_ = std::thread([this] { server_->run(); });
  }
  virtual void routes() {}
  void TearDown() override {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
  }

  // A fresh connection still gets answered.
  void expect_serving() {
    RawClient c(port_);
    ASSERT_TRUE(c.send("GET /hello HTTP/1.1\r\nHost: t\r\n\r\n"));
    const auto r = c.response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "hi");
  }

  std::unique_ptr<Server> server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> posts_{0};
};

void pipelined(int port, int n) {
  RawClient c(port);
  std::string all;
  for (int i = 0; i < n; ++i)
    all += "GET /echo?" + std::to_string(i) + " HTTP/1.1\r\nHost: t\r\n\r\n";
  ASSERT_TRUE(c.send(all));
  for (int i = 0; i < n; ++i) {
    const auto r = c.response();
    ASSERT_TRUE(r) << "response " << i << " of " << n << " never came";
    EXPECT_EQ(r->status, 200);
    ASSERT_EQ(r->body, std::to_string(i));
  }
  // The connection is still open for more.
  ASSERT_TRUE(c.send("GET /echo?more HTTP/1.1\r\nHost: t\r\n\r\n"));
  const auto r = c.response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "more");
}

TEST_F(HttpServer, FourPipelinedRequestsAreAllAnsweredInOrder) {
  start();
  pipelined(port_, 4);
  EXPECT_EQ(server_->stats().connections.load(), 1u);
}

TEST_F(HttpServer, TwoHundredOnePipelinedRequestsAreAllAnsweredInOrder) {
  start();
  pipelined(port_, 201);
  EXPECT_EQ(server_->stats().requests.load(), 202u);
}

TEST_F(HttpServer, PipelinedPostsWithBodiesAreAnsweredInOrder) {
  start();
  RawClient c(port_);
  std::string all;
  for (int i = 0; i < 10; ++i) {
    const std::string body(size_t(i) * 1000, char('a' + i));
    all += "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body;
  }
  ASSERT_TRUE(c.send(all));
  for (int i = 0; i < 10; ++i) {
    const auto r = c.response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->body, std::string(size_t(i) * 1000, char('a' + i)));
  }
}

TEST_F(HttpServer, ChunkedBodyOverTheLimitGets413WithoutBeingRead) {
  ServerOptions o;
  o.limits.max_body_bytes = 1 << 20;
  start(o);
  RawClient c(port_);
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"));
  // Up to 64 MiB in 64 KiB chunks, until the server stops taking them.
  std::thread sender([&] {
    const std::string chunk = "10000\r\n" + std::string(65536, 'x') + "\r\n";
    for (int i = 0; i < 1024; ++i)
      if (!c.send(chunk)) return;
  });
  const auto r = c.response();
  ::shutdown(c.fd(), SHUT_RDWR);  // ends the sender if the server is still reading
  sender.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(r->body.find("larger than 1048576 bytes"), std::string::npos) << r->body;
  EXPECT_EQ(posts_.load(), 0);
  // Parsed: the limit and at most one read block past it; dropped after the answer: bounded.
  EXPECT_LE(server_->stats().bytes_read.load(), (1u << 20) + (64u << 10) + 4096);
  EXPECT_LE(server_->stats().bytes_discarded.load(), 256u << 10);
  expect_serving();
}

TEST_F(HttpServer, OneHugeChunkIsRefusedOnItsSizeLine) {
  ServerOptions o;
  o.limits.max_body_bytes = 1 << 20;
  start(o);
  RawClient c(port_);
  ASSERT_TRUE(
      c.send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
             "8000000\r\n"));
  const auto r = c.response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(posts_.load(), 0);
}

TEST_F(HttpServer, ContentLengthOverTheLimitGets413) {
  ServerOptions o;
  o.limits.max_body_bytes = 1 << 20;
  start(o);
  // A client that writes its whole body before reading (as cpp-httplib's does) still gets the
  // answer: the body is read and dropped, never kept or parsed.
  RawClient c(port_);
  const std::string body(2u << 20, 'b');
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body));
  const auto r = c.response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(r->header("Connection"), "close");
  EXPECT_EQ(posts_.load(), 0);
  EXPECT_LE(server_->stats().bytes_read.load(), 64u << 10);
}

TEST_F(HttpServer, KnownPathWithAnotherMethodIs405WithAllow) {
  start();
  RawClient c(port_);
  ASSERT_TRUE(
      c.send("DELETE /echo HTTP/1.1\r\nHost: t\r\n\r\nGET /nowhere HTTP/1.1\r\nHost: t\r\n\r\n"
             "PUT /hello HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"));
  auto r = c.response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->header("Allow"), "GET, POST");
  EXPECT_NE(r->body.find("not allowed"), std::string::npos) << r->body;
  r = c.response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(r->body, "{\"error\":\"no route for GET /nowhere\"}");
  r = c.response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->header("Allow"), "GET");
}

// Prefix routes ("/v1/models/*", for GET /v1/models/{id}): they match only with something after
// the prefix, the longest prefix wins, an exact path wins over any, and 405 holds for them too.
class HttpPrefixRoutes : public HttpServer {
  void routes() override {
    auto reply = [](std::string tag) {
      return [tag](const Request& req, Response& res) {
        res.set_content(tag + " " + req.path, "text/plain");
      };
    };
    server_->Get("/m", reply("exact"));
    server_->Get("/m/*", reply("m"));
    server_->Get("/m/x/*", reply("mx"));
    server_->Get("/m/fixed", reply("fixed"));
  }
};

TEST_F(HttpPrefixRoutes, MatchTheLongestPrefixAfterExactPaths) {
  start();
  struct Case {
    std::string line;
    int status;
    std::string body;
  };
  const std::vector<Case> cases = {
      {"GET /m", 200, "exact /m"},
      {"GET /m/a%3Ab", 200, "m /m/a%3Ab"},
      {"GET /m/x", 200, "m /m/x"},
      {"GET /m/x/y/z", 200, "mx /m/x/y/z"},
      {"GET /m/fixed", 200, "fixed /m/fixed"},
      {"GET /m/", 404, ""},
      {"POST /m/a", 405, ""},
  };
  for (const Case& c : cases) {
    RawClient client(port_);
    ASSERT_TRUE(client.send(c.line + " HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"));
    const auto r = client.response();
    ASSERT_TRUE(r) << c.line;
    EXPECT_EQ(r->status, c.status) << c.line;
    if (c.status == 200) {
      EXPECT_EQ(r->body, c.body) << c.line;
    }
    if (c.status == 405) {
      EXPECT_EQ(r->header("Allow"), "GET") << c.line;
    }
  }
}

TEST_F(HttpServer, OversizedHeadersAre431) {
  start();
  {
    RawClient c(port_);
    ASSERT_TRUE(
        c.send("GET /hello HTTP/1.1\r\nHost: t\r\nX-Big: " + std::string(20000, 'b') + "\r\n\r\n"));
    const auto r = c.response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 431);
  }
  {
    RawClient c(port_);
    std::string many = "GET /hello HTTP/1.1\r\nHost: t\r\n";
    for (int i = 0; i < 200; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
    ASSERT_TRUE(c.send(many + "\r\n"));
    const auto r = c.response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 431);
  }
  // 8 KiB of headers is within the limit (httplib refused it with 400).
  RawClient c(port_);
  ASSERT_TRUE(
      c.send("GET /hello HTTP/1.1\r\nHost: t\r\nX-Big: " + std::string(8192, 'b') + "\r\n\r\n"));
  const auto r = c.response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpServer, ExpectContinueGetsAnInterimResponseBeforeTheBody) {
  start();
  RawClient c(port_);
  const std::string body(2000, 'q');
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n"));
  const auto deadline = std::chrono::steady_clock::now() + RawClient::kPatience;
  const auto interim = c.head(deadline);
  ASSERT_TRUE(interim);
  EXPECT_EQ(interim->status, 100);
  ASSERT_TRUE(c.send(body));
  const auto r = c.response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, body);
}

TEST_F(HttpServer, ExpectContinueOverTheLimitGets413Instead) {
  ServerOptions o;
  o.limits.max_body_bytes = 1000;
  start(o);
  RawClient c(port_);
  ASSERT_TRUE(
      c.send("POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
             "Content-Length: 1001\r\n\r\n"));
  const auto r = c.response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
}

TEST_F(HttpServer, ARequestTrickledAByteAtATimeStillHasOneDeadline) {
  ServerOptions o;
  o.request_timeout = std::chrono::milliseconds(300);
  start(o);
  RawClient c(port_);
  // Each byte would restart an idle timer; the request's deadline must hold regardless. The
  // client sends a byte whenever 20 ms pass without an answer, and stops at the answer.
  const std::string trickle =
      "GET /hello HTTP/1.1\r\nHost: t\r\nX-Slow: " + std::string(16000, 's');
  size_t sent = 0;
  while (sent < trickle.size()) {
    if (!c.send(trickle.substr(sent, 1))) break;
    ++sent;
    pollfd p{c.fd(), POLLIN, 0};
    if (::poll(&p, 1, 20) > 0) break;
  }
  const auto r = c.response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 408) << "after " << sent << " bytes";
  EXPECT_LT(sent, trickle.size());
}

TEST_F(HttpServer, KeepAliveReusesTheConnection) {
  start();
  RawClient c(port_);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.send("GET /hello HTTP/1.1\r\nHost: t\r\n\r\n"));
    const auto r = c.response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->header("Connection"), "");
  }
  EXPECT_EQ(server_->stats().connections.load(), 1u);
  ASSERT_TRUE(c.send("GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
  const auto r = c.response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->header("Connection"), "close");
  EXPECT_TRUE(c.closed_by_server());
}

TEST_F(HttpServer, Http10ClosesUnlessAskedToKeepAlive) {
  start();
  {
    RawClient c(port_);
    ASSERT_TRUE(c.send("GET /hello HTTP/1.0\r\n\r\n"));
    const auto r = c.response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "hi");
    EXPECT_EQ(r->header("Connection"), "close");
    EXPECT_TRUE(c.closed_by_server());
  }
  RawClient c(port_);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(c.send("GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    const auto r = c.response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->header("Connection"), "keep-alive");
  }
}

TEST_F(HttpServer, HandlerExceptionsGoToTheExceptionHook) {
  start();
  RawClient c(port_);
  ASSERT_TRUE(
      c.send("GET /throw HTTP/1.1\r\nHost: t\r\n\r\nGET /hello HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto r = c.response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  EXPECT_EQ(r->body, "caught: boom");
  r = c.response();  // and the connection goes on
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpServer, MalformedRequestsAre400AndTheServerKeepsServing) {
  start();
  const std::pair<std::string, int> cases[] = {
      {"GARBAGE\r\n\r\n", 400},
      {"GET /hello HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n", 400},
      {"GET /hello HTTP/1.1\r\nHost: t\r\nA: x\r\n folded\r\n\r\n", 400},
      {std::string("GET /hello HTTP/1.1\r\nHost: t\r\nA: \0\r\n\r\n", 38), 400},
      {"GET /hello HTTP/1.1\r\n\r\n", 400},  // no Host
      {"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n", 400},
      {"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 12abc\r\n\r\n", 400},
      {"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabc", 400},
      {"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
       400},
      {"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
      {"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
      {"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX", 400},
      {"GET /hello HTTP/3.0\r\nHost: t\r\n\r\n", 505},
  };
  for (const auto& [raw, status] : cases) {
    RawClient c(port_);
    ASSERT_TRUE(c.send(raw));
    const auto r = c.response();
    ASSERT_TRUE(r) << raw;
    EXPECT_EQ(r->status, status) << raw;
    EXPECT_EQ(r->header("Connection"), "close") << raw;
    EXPECT_EQ(r->header("Content-Type"), "application/json") << raw;  // the error hook's body
    EXPECT_TRUE(c.closed_by_server()) << raw;
  }
  EXPECT_EQ(posts_.load(), 0);
  expect_serving();
}

// A stream the test paces: each chunk is written once the client has read the one before.
class HttpStream : public HttpServer {
 protected:
  void routes() override {
    server_->Get("/stream", [this](const Request&, Response& res) {
      res.set_chunked_content_provider(
          "text/event-stream",
          [this](size_t, DataSink& sink) {
            if (leave_) {
              const std::string first = "first";
              if (!sink.write(first.data(), first.size())) return false;
              // Waits for tokens as the gateway does, asking whether the client is still there.
              while (!sink.client_gone()) ::poll(nullptr, 0, 5);
              saw_gone_ = true;
              return false;
            }
            const int i = next_++;
            if (i == 3) {
              sink.done();
              return true;
            }
            if (i > 0) read_.get_future().wait();  // the client has the previous chunk
            read_ = std::promise<void>();
            const std::string data = "chunk" + std::to_string(i);
            return sink.write(data.data(), data.size());
          },
          [this](bool ok) { ended_.set_value(ok); });
    });
  }
  std::atomic<int> next_{0};
  std::promise<void> read_;
  std::promise<bool> ended_;
  std::atomic<bool> leave_{false};
  std::atomic<bool> saw_gone_{false};
};

TEST_F(HttpStream, ChunksArriveOneByOne) {
  start();
  RawClient c(port_);
  ASSERT_TRUE(c.send("GET /stream HTTP/1.1\r\nHost: t\r\n\r\n"));
  const auto deadline = std::chrono::steady_clock::now() + RawClient::kPatience;
  const auto head = c.head(deadline);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->header("Transfer-Encoding"), "chunked");
  EXPECT_EQ(head->header("Content-Type"), "text/event-stream");
  for (int i = 0; i < 3; ++i) {
    const auto chunk = c.chunk(deadline);
    ASSERT_TRUE(chunk);
    EXPECT_EQ(*chunk, "chunk" + std::to_string(i));
    if (i < 2) read_.set_value();
  }
  EXPECT_EQ(c.chunk(deadline), std::string());  // the last chunk
  EXPECT_TRUE(ended_.get_future().get());
  // The connection goes on after a stream.
  ASSERT_TRUE(c.send("GET /hello HTTP/1.1\r\nHost: t\r\n\r\n"));
  const auto r = c.response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "hi");
}

TEST_F(HttpStream, AClientThatLeavesMidStreamIsNoticedWithoutAWrite) {
  leave_ = true;
  start();
  std::future<bool> ended = ended_.get_future();
  {
    RawClient c(port_);
    ASSERT_TRUE(c.send("GET /stream HTTP/1.1\r\nHost: t\r\n\r\n"));
    const auto deadline = std::chrono::steady_clock::now() + RawClient::kPatience;
    ASSERT_TRUE(c.head(deadline));
    EXPECT_EQ(c.chunk(deadline), "first");
  }  // the client leaves
  ASSERT_EQ(ended.wait_for(RawClient::kPatience), std::future_status::ready);
  EXPECT_FALSE(ended.get());
  EXPECT_TRUE(saw_gone_);
  expect_serving();
}

TEST_F(HttpServer, StopReturnsWithIdleAndHalfSentConnectionsOpen) {
  start();
  RawClient idle(port_);
  ASSERT_TRUE(idle.send("GET /hello HTTP/1.1\r\nHost: t\r\n\r\n"));
  ASSERT_TRUE(idle.response());
  RawClient half(port_);
  ASSERT_TRUE(half.send("GET /hello HTTP/1.1\r\nHost"));
  server_->stop();  // wakes both connection threads' polls and joins them
  thread_.join();
  EXPECT_TRUE(idle.closed_by_server());
  EXPECT_TRUE(half.closed_by_server());
}

TEST(HttpServerBind, RefusesATakenPortNamingIt) {
  Server a;
  const int port = a.bind("127.0.0.1", 0);
  Server b;
  try {
    b.bind("127.0.0.1", port);
    FAIL() << "bound a taken port";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos);
  }
  EXPECT_THROW(b.bind("not a host", 0), std::runtime_error);
}

}  // namespace
}  // namespace hearth::http
