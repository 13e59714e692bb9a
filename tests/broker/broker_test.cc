// The broker in this process, on its own thread, with real Unix sockets and clients.

#include "broker/broker.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <random>
#include <thread>

#include "broker_test_support.h"
#include "ipc/printable.h"

namespace hearth::test {
namespace {

using ipc::ErrorCode;
using nlohmann::json;

ErrorCode error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ipc::ProtocolError& e) {
    return e.code();
  }
  ADD_FAILURE() << "expected a ProtocolError";
  return ErrorCode::kInternal;
}

void expect_served(ipc::Client& client) {
  EXPECT_EQ(client.call(ipc::op::kList).body["models"], json({"test"}));
}

TEST(Broker, AnswersHelloWithVersionClientIdAndAdmin) {
  InProcessBroker server;
  ipc::Client a = server.client();
  ipc::Client b = server.client();
  EXPECT_EQ(a.server_hello()["version"], ipc::kProtocolVersion);
  EXPECT_EQ(a.server_hello()["server"], "hearth");
  EXPECT_EQ(a.server_hello()["admin"], true);  // same uid as the server
  EXPECT_NE(a.server_hello()["client_id"], b.server_hello()["client_id"]);
}

TEST(Broker, SocketIsPrivateToItsOwner) {
  InProcessBroker server;
  struct stat st {};
  ASSERT_EQ(::stat(server.path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  const std::string dir = server.path().substr(0, server.path().rfind('/'));
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

TEST(Broker, ImportsFdsThatReferToTheServersFiles) {
  InProcessBroker server;
  ipc::Client client = server.client();
  const std::vector<std::uint64_t> ids = {7, 8, 9};
  std::vector<UniqueFd> fds = client.import_allocations("test", ids);
  ASSERT_EQ(fds.size(), 3u);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(read_all(fds[i].get()), "allocation " + std::to_string(ids[i]));
  }
  EXPECT_EQ(server.handler().leases(), 1);
  client.call(ipc::op::kRelease, {{"model", "test"}});
  EXPECT_EQ(server.handler().leases(), 0);
}

TEST(Broker, ImportsMoreThan250AllocationsInBatches) {
  InProcessBroker server;
  ipc::Client client = server.client();
  std::vector<std::uint64_t> ids(600);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = i;
  const std::vector<UniqueFd> fds = client.import_allocations("test", ids);
  ASSERT_EQ(fds.size(), ids.size());
  EXPECT_EQ(read_all(fds[599].get()), "allocation 599");
  // One request may not ask for more than a frame can carry.
  std::vector<std::uint64_t> too_many(251, 1);
  EXPECT_EQ(
      error_of([&] { client.call(ipc::op::kImport, ipc::make_import_args("test", too_many)); }),
      ErrorCode::kTooLarge);
  expect_served(client);
}

TEST(Broker, ServesManyConcurrentClients) {
  broker::BrokerOptions options;
  options.max_clients = 128;
  InProcessBroker server(options);
  constexpr int kClients = 64;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      try {
        ipc::Client client = server.client("client-" + std::to_string(t));
        for (int i = 0; i < 20; ++i) {
          const std::uint64_t id = static_cast<std::uint64_t>(t * 100 + i);
          const std::vector<std::uint64_t> ids = {id};
          auto fds = client.import_allocations("test", ids);
          if (fds.size() != 1 || read_all(fds[0].get()) != "allocation " + std::to_string(id)) {
            ++failures;
          }
          client.call(ipc::op::kStats);
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << "client " << t << ": " << e.what();
        ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(eventually([&] { return server.handler().disconnects().size() == kClients; }));
  EXPECT_EQ(server.handler().leases(), 0);
}

TEST(Broker, ReportsHandlerErrorsAndKeepsTheConnection) {
  InProcessBroker server;
  ipc::Client client = server.client();
  EXPECT_EQ(error_of([&] {
              client.call(ipc::op::kManifest, {{"model", "nope"}});
            }),
            ErrorCode::kNotFound);
  EXPECT_EQ(error_of([&] {
              client.call(ipc::op::kManifest, {{"model", "explode"}});
            }),
            ErrorCode::kInternal);
  EXPECT_EQ(error_of([&] {
              client.call(ipc::op::kManifest, {{"model", 5}});
            }),
            ErrorCode::kBadRequest);
  EXPECT_EQ(error_of([&] { client.call("frobnicate"); }), ErrorCode::kUnknownOp);
  EXPECT_TRUE(server.logged("the handler blew up"));
  expect_served(client);
}

// --- garbage on the socket: each gets an error reply and/or a closed connection, while a
// --- bystander that connected before keeps being served.

class Garbage : public ::testing::Test {
 protected:
  Garbage() : server_(options()), bystander_(server_.client("bystander")) {}
  ~Garbage() override {
    expect_served(bystander_);
    EXPECT_EQ(server_.handler().leases(), 0);
  }
  static broker::BrokerOptions options() {
    broker::BrokerOptions o;
    o.idle_timeout = 1s;  // a stalled garbage client is dropped soon
    return o;
  }
  void expect_error_and_close(int socket, ErrorCode code) {
    const Outcome outcome = outcome_of(socket);
    ASSERT_TRUE(outcome.error) << "no error reply";
    EXPECT_EQ(outcome.error->code, code) << outcome.error->message;
    EXPECT_TRUE(outcome.closed);
    expect_served(bystander_);
  }

  InProcessBroker server_;
  ipc::Client bystander_;
};

TEST_F(Garbage, RandomBytes) {
  std::mt19937 rng(1234);
  for (int round = 0; round < 20; ++round) {
    UniqueFd socket = raw_connect(server_.path());
    std::string noise(4096, '\0');
    for (char& c : noise) c = static_cast<char>(rng());
    write_all(socket.get(), noise);
    const Outcome outcome = outcome_of(socket.get());
    EXPECT_TRUE(outcome.closed) << "round " << round;
    if (outcome.error) {
      EXPECT_TRUE(outcome.error->code == ErrorCode::kTooLarge ||
                  outcome.error->code == ErrorCode::kBadRequest ||
                  outcome.error->code == ErrorCode::kTimeout)
          << outcome.error->message;
    }
    expect_served(bystander_);
  }
}

TEST_F(Garbage, AFourGibibyteLength) {
  UniqueFd socket = raw_connect(server_.path());
  write_all(socket.get(), header(0xffffffffu) + "{}");
  expect_error_and_close(socket.get(), ErrorCode::kTooLarge);
}

TEST_F(Garbage, AFrameOverTheRequestLimit) {
  UniqueFd socket = raw_connect(server_.path());
  raw_hello(socket.get());
  write_all(socket.get(), header(2 << 20));  // the payload never needs to be sent
  expect_error_and_close(socket.get(), ErrorCode::kTooLarge);
}

TEST_F(Garbage, ATruncatedFrame) {
  UniqueFd socket = raw_connect(server_.path());
  const std::string frame =
      ipc::encode_frame(ipc::make_request("hello", 1, ipc::make_hello_args("x")));
  write_all(socket.get(), frame.substr(0, frame.size() / 2));
  ::shutdown(socket.get(), SHUT_WR);
  expect_error_and_close(socket.get(), ErrorCode::kBadRequest);
}

TEST_F(Garbage, ATruncatedFrameThenSilence) {
  UniqueFd socket = raw_connect(server_.path());
  raw_hello(socket.get());
  write_all(socket.get(), header(100) + "{\"op\":");
  expect_error_and_close(socket.get(), ErrorCode::kTimeout);
}

TEST_F(Garbage, InvalidJson) {
  UniqueFd socket = raw_connect(server_.path());
  write_all(socket.get(), header(9) + "{not json");
  expect_error_and_close(socket.get(), ErrorCode::kBadRequest);
}

// The parser's complaint is readable (not "(unprintable message)") and never quotes what was
// sent: the shared JSON reader (base/json_limits.h) names only the line and column.
TEST_F(Garbage, BytesThatAreNotUtf8) {
  UniqueFd socket = raw_connect(server_.path());
  const std::string payload = "{\"op\": \"hello\", \"id\": \xff\xfe}";
  write_all(socket.get(), header(static_cast<std::uint32_t>(payload.size())) + payload);
  const Outcome outcome = outcome_of(socket.get());
  ASSERT_TRUE(outcome.error);
  EXPECT_EQ(outcome.error->code, ErrorCode::kBadRequest);
  EXPECT_NE(outcome.error->message.find("invalid JSON"), std::string::npos)
      << outcome.error->message;
  EXPECT_TRUE(is_valid_utf8(outcome.error->message)) << outcome.error->message;
  EXPECT_EQ(outcome.error->message.find("unprintable"), std::string::npos)
      << outcome.error->message;
  EXPECT_TRUE(outcome.closed);
}

TEST_F(Garbage, JsonThatIsNotAnObject) {
  for (const std::string payload : {"[1,2,3]", "42", "\"hello\"", "null"}) {
    UniqueFd socket = raw_connect(server_.path());
    write_all(socket.get(), header(static_cast<std::uint32_t>(payload.size())) + payload);
    expect_error_and_close(socket.get(), ErrorCode::kBadRequest);
  }
}

TEST_F(Garbage, ARequestWithoutAnId) {
  UniqueFd socket = raw_connect(server_.path());
  raw_hello(socket.get());
  ipc::send_frame(socket.get(), {{"op", "list"}});
  expect_error_and_close(socket.get(), ErrorCode::kBadRequest);
}

TEST_F(Garbage, ARequestBeforeHello) {
  UniqueFd socket = raw_connect(server_.path());
  ipc::send_frame(socket.get(), ipc::make_request(ipc::op::kList, 3));
  const Outcome outcome = outcome_of(socket.get());
  ASSERT_TRUE(outcome.error);
  EXPECT_EQ(outcome.error->code, ErrorCode::kBadRequest);
  EXPECT_EQ(outcome.error->id, 3u);
  EXPECT_TRUE(outcome.closed);
}

TEST_F(Garbage, AnotherProtocolVersion) {
  UniqueFd socket = raw_connect(server_.path());
  ipc::send_frame(socket.get(), ipc::make_request(ipc::op::kHello, 1, {{"version", 99}}));
  expect_error_and_close(socket.get(), ErrorCode::kVersionMismatch);
}

// Issue 21: these read as "the client did not state a protocol version".
TEST_F(Garbage, AVersionOfTheWrongTypeOrOutOfRangeIsNamed) {
  const std::pair<std::string, std::string> cases[] = {
      {R"("1")", "must be an integer, got string"},
      {"1.0", "must be an integer, got 1.0"},
      {"18446744073709551617", "out of range"},
  };
  for (const auto& [version, expected] : cases) {
    UniqueFd socket = raw_connect(server_.path());
    const std::string payload = R"({"op":"hello","id":1,"version":)" + version + "}";
    write_all(socket.get(), header(uint32_t(payload.size())) + payload);
    const Outcome outcome = outcome_of(socket.get());
    ASSERT_TRUE(outcome.error) << version;
    EXPECT_EQ(outcome.error->code, ErrorCode::kVersionMismatch) << outcome.error->message;
    EXPECT_NE(outcome.error->message.find(expected), std::string::npos) << outcome.error->message;
    EXPECT_NE(outcome.error->message.find("speaks protocol version " +
                                          std::to_string(ipc::kProtocolVersion)),
              std::string::npos);
    EXPECT_TRUE(outcome.closed);
  }
}

// Issue 21: a frame that starts with NUL read as "unexpected end of input".
TEST_F(Garbage, AFrameWithANulByteIsNamed) {
  UniqueFd socket = raw_connect(server_.path());
  const std::string payload = std::string(1, '\0') + R"({"op":"hello","id":1,"version":1})";
  write_all(socket.get(), header(uint32_t(payload.size())) + payload);
  const Outcome outcome = outcome_of(socket.get());
  ASSERT_TRUE(outcome.error);
  EXPECT_EQ(outcome.error->code, ErrorCode::kBadRequest);
  EXPECT_NE(outcome.error->message.find("NUL byte at offset 0"), std::string::npos)
      << outcome.error->message;
  EXPECT_TRUE(outcome.closed);
}

TEST_F(Garbage, AnUnknownOpIsAnsweredAndTheConnectionStays) {
  UniqueFd socket = raw_connect(server_.path());
  raw_hello(socket.get());
  ipc::send_frame(socket.get(), ipc::make_request("frobnicate", 5));
  ipc::ReceiveOptions options;
  options.timeout = kPatience;
  auto reply = ipc::receive_frame(socket.get(), options);
  ASSERT_TRUE(reply);
  const ipc::ReplyStatus status = ipc::parse_reply_status(reply->body);
  EXPECT_EQ(status.id, 5u);
  EXPECT_EQ(status.code, ErrorCode::kUnknownOp);
  ipc::send_frame(socket.get(), ipc::make_request(ipc::op::kList, 6));
  reply = ipc::receive_frame(socket.get(), options);
  ASSERT_TRUE(reply);
  EXPECT_TRUE(ipc::parse_reply_status(reply->body).ok);
}

TEST_F(Garbage, FdsAttachedToARequest) {
  const int baseline = count_open_fds();
  {
    UniqueFd socket = raw_connect(server_.path());
    raw_hello(socket.get());
    UniqueFd a = make_memfd("a");
    UniqueFd b = make_memfd("b");
    ipc::send_frame(socket.get(), ipc::make_request(ipc::op::kList, 2),
                    std::vector<int>{a.get(), b.get()});
    expect_error_and_close(socket.get(), ErrorCode::kBadRequest);
  }
  // The broker's copies are closed too.
  EXPECT_TRUE(eventually([&] { return count_open_fds() == baseline; }))
      << count_open_fds() << " vs " << baseline;
}

TEST_F(Garbage, AClientThatNeverSpeaks) {
  UniqueFd socket = raw_connect(server_.path());
  expect_error_and_close(socket.get(), ErrorCode::kTimeout);
  EXPECT_TRUE(server_.logged("sent no hello"));
}

TEST_F(Garbage, AClientThatStopsReading) {
  UniqueFd socket = raw_connect(server_.path());
  raw_hello(socket.get());
  // Far more reply bytes than the socket holds; the client reads none of them.
  for (int i = 0; i < 100; ++i) {
    write_all(socket.get(),
              ipc::encode_frame(ipc::make_request(ipc::op::kStats, 10 + i, {{"pad", 256 * 1024}})));
  }
  EXPECT_TRUE(server_.logged("not reading its replies"));
  expect_served(bystander_);  // served while the slow client is stuck and after it is dropped
  // What the client finds when it finally reads: some replies, then the end of the stream.
  EXPECT_TRUE(outcome_of(socket.get()).closed);
}

TEST(Broker, DropsAClientWhoseDeferredRepliesPileUpUnread) {
  broker::BrokerOptions options;
  options.max_output_bytes = 1 << 20;
  InProcessBroker server(options);
  ipc::Client bystander = server.client("bystander");
  UniqueFd socket = raw_connect(server.path());
  raw_hello(socket.get());
  // Deferred replies do not hold up reading requests; once released, 100 x 256 KiB of replies
  // pile up behind a client that reads none of them.
  server.handler().hold_replies();
  for (int i = 0; i < 100; ++i) {
    write_all(socket.get(), ipc::encode_frame(ipc::make_request(
                                ipc::op::kStats, 10 + i, {{"pad", 256 * 1024}, {"later", true}})));
  }
  EXPECT_TRUE(eventually([&] { return server.handler().parked_replies() == 100; }));
  server.handler().release_replies();
  EXPECT_TRUE(server.logged("bytes and 0 descriptors queued"));
  expect_served(bystander);
  EXPECT_TRUE(outcome_of(socket.get()).closed);
}

// --- limits and authorisation

// Whether the broker comes to admit one more client: once it has seen a client that went
// away go, there is room again.
bool admits_another_client(InProcessBroker& server) {
  return eventually([&] {
    try {
      server.client();
      return true;
    } catch (const ipc::ProtocolError&) {
      return false;
    }
  });
}

TEST(Broker, RefusesClientsBeyondTheLimit) {
  broker::BrokerOptions options;
  options.max_clients = 2;
  InProcessBroker server(options);
  std::optional<ipc::Client> a = server.client();
  ipc::Client b = server.client();
  EXPECT_EQ(error_of([&] { server.client(); }), ErrorCode::kBusy);
  a.reset();
  EXPECT_TRUE(admits_another_client(server));
  expect_served(b);
}

// Writes `bytes` one at a time, `gap` apart, until all are sent or the server hangs up.
void trickle(int socket, const std::string& bytes, std::chrono::milliseconds gap) {
  for (char c : bytes) {
    if (::send(socket, &c, 1, MSG_NOSIGNAL) != 1) return;
    std::this_thread::sleep_for(gap);
  }
}

// The broker answers `socket` with a timeout error saying `message`, then hangs up; `kept`
// says what went wrong when no error came.
void expect_timed_out(int socket, const std::string& message, const std::string& kept) {
  const Outcome outcome = outcome_of(socket);
  ASSERT_TRUE(outcome.error) << kept;
  EXPECT_EQ(outcome.error->code, ErrorCode::kTimeout);
  EXPECT_EQ(outcome.error->message, message);
  EXPECT_TRUE(outcome.closed);
}

// Each byte well inside the limit, the whole frame far beyond it: a deadline, not an idle timer.
TEST(Broker, AHelloTrickledAByteAtATimeMissesItsDeadline) {
  broker::BrokerOptions options;
  options.idle_timeout = 300ms;
  InProcessBroker server(options);
  UniqueFd socket = raw_connect(server.path());
  trickle(socket.get(),
          ipc::encode_frame(ipc::make_request(ipc::op::kHello, 1, ipc::make_hello_args("slow"))),
          30ms);
  expect_timed_out(socket.get(), "sent no hello within 300 ms", "the trickled hello was accepted");
}

TEST(Broker, AFrameTrickledAfterHelloMissesItsDeadline) {
  broker::BrokerOptions options;
  options.idle_timeout = 300ms;
  InProcessBroker server(options);
  UniqueFd socket = raw_connect(server.path());
  raw_hello(socket.get());
  trickle(socket.get(), ipc::encode_frame(ipc::make_request(ipc::op::kList, 2)), 30ms);
  expect_timed_out(socket.get(), "did not finish the frame it started within 300 ms",
                   "the trickled request was answered");
}

TEST(Broker, AGreetedClientHoldingNoLeaseIsDroppedWhenIdle) {
  broker::BrokerOptions options;
  options.quiet_timeout = 300ms;
  InProcessBroker server(options);
  ipc::Client worker = server.client("worker");  // takes a lease: may stay quiet
  const std::vector<std::uint64_t> ids = {1};
  ASSERT_EQ(worker.import_allocations("test", ids).size(), 1u);
  // A client whose request is in flight is not idle, however long the reply takes.
  server.handler().hold_replies();
  UniqueFd waiting = raw_connect(server.path());
  raw_hello(waiting.get());
  ipc::send_frame(waiting.get(), ipc::make_request(ipc::op::kStats, 2, {{"later", true}}));
  UniqueFd idle = raw_connect(server.path());
  raw_hello(idle.get());

  expect_timed_out(idle.get(), "idle for 300 ms without holding a lease",
                   "an idle client without a lease was kept");

  server.handler().release_replies();
  ipc::ReceiveOptions patience;
  patience.timeout = kPatience;
  const auto reply = ipc::receive_frame(waiting.get(), patience);
  ASSERT_TRUE(reply);
  EXPECT_TRUE(ipc::parse_reply_status(reply->body).ok);
  expect_served(worker);
  // Once it lets go of its lease, the worker is an idle client like any other.
  const auto worker_id = worker.server_hello()["client_id"].get<broker::ClientId>();
  worker.call(ipc::op::kRelease, {{"model", "test"}});
  EXPECT_TRUE(eventually([&] {
    for (const TestHandler::Event& e : server.handler().disconnects())
      if (e.id == worker_id) return true;
    return false;
  }));
}

TEST(Broker, OneUidCannotTakeEverySlot) {
  broker::BrokerOptions options;
  options.admin_uid = ::geteuid() + 1;  // the cap spares the admin; we are not it here
  options.max_clients_per_uid = 2;
  InProcessBroker server(options);
  std::optional<ipc::Client> a = server.client();
  ipc::Client b = server.client();
  try {
    server.client();
    FAIL() << "a third connection from one uid was admitted";
  } catch (const ipc::ProtocolError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBusy);
    EXPECT_NE(e.message().find("uid " + std::to_string(::geteuid()) +
                               " already has 2 connections to this server (at most 2 per uid)"),
              std::string::npos)
        << e.message();
  }
  a.reset();
  EXPECT_TRUE(admits_another_client(server));
  expect_served(b);
}

TEST(Broker, TheAdminUidIsNotCappedPerUid) {
  broker::BrokerOptions options;
  options.max_clients_per_uid = 1;  // we are the admin (the server's own uid)
  InProcessBroker server(options);
  ipc::Client a = server.client(), b = server.client(), c = server.client();
  expect_served(c);
}

TEST(Broker, RefusesUidsOutsideTheAllowList) {
  broker::BrokerOptions options;
  options.allowed_uids = {::geteuid() + 1};  // everyone but us
  InProcessBroker server(options);
  try {
    server.client();
    FAIL() << "connected although the uid is not allowed";
  } catch (const ipc::ProtocolError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnauthorized);
    EXPECT_NE(e.message().find("uid " + std::to_string(::geteuid())), std::string::npos);
  }
  EXPECT_TRUE(server.handler().connects().empty());
  EXPECT_TRUE(server.logged("not in the allow list"));
}

TEST(Broker, AdminOpsNeedTheAdminUid) {
  broker::BrokerOptions options;
  options.admin_uid = ::geteuid() + 1;  // we are not the admin
  InProcessBroker server(options);
  ipc::Client client = server.client();
  EXPECT_EQ(client.server_hello()["admin"], false);
  EXPECT_EQ(error_of([&] {
              client.call(ipc::op::kLoad, {{"model", "m"}});
            }),
            ErrorCode::kUnauthorized);
  EXPECT_EQ(error_of([&] {
              client.call(ipc::op::kUnload, {{"model", "m"}});
            }),
            ErrorCode::kUnauthorized);
  EXPECT_EQ(error_of([&] { client.call(ipc::op::kShutdown); }), ErrorCode::kUnauthorized);
  expect_served(client);  // still running, still connected
  EXPECT_EQ(::access(server.path().c_str(), F_OK), 0);
}

TEST(Broker, AdminShutdownStopsTheServerAndRemovesTheSocket) {
  InProcessBroker server;
  ipc::Client admin = server.client();
  ipc::Client other = server.client();
  EXPECT_EQ(admin.call(ipc::op::kShutdown).body["stopping"], true);
  server.join();
  EXPECT_NE(::access(server.path().c_str(), F_OK), 0);
  EXPECT_THROW(other.call(ipc::op::kList), ipc::ConnectionClosed);
  EXPECT_THROW(server.client(), ipc::ServerNotRunning);
  EXPECT_EQ(server.handler().disconnects().size(), 2u);
}

TEST(Broker, RefusesToStartOnALiveServersSocket) {
  InProcessBroker first;
  TestHandler handler;
  broker::BrokerOptions options;
  options.socket_path = first.path();
  options.log = nullptr;
  EXPECT_THROW(broker::Broker(options, handler), ipc::IpcError);
  ipc::Client client = first.client();
  expect_served(client);
}

// --- replies that complete later

TEST(Broker, ServesOthersWhileAReplyIsDeferred) {
  InProcessBroker server;
  server.handler().hold_replies();
  ipc::Client loader = server.client("loader");
  ipc::Client other = server.client("other");
  std::thread load([&] {
    EXPECT_EQ(loader.call(ipc::op::kLoad, {{"model", "big"}}).body["loaded"], "big");
  });
  // The load cannot finish before release_replies(), so this is served while it is pending.
  expect_served(other);
  server.handler().release_replies();
  load.join();
}

TEST(Broker, GracefulShutdownFinishesDeferredReplies) {
  InProcessBroker server;
  server.handler().hold_replies();
  ipc::Client loader = server.client("loader");
  ipc::Client admin = server.client("admin");
  std::atomic<bool> loaded{false};
  std::thread load([&] {
    ipc::Frame reply = loader.call(ipc::op::kLoad);
    loaded = reply.body["loaded"] == "test" && reply.fds.size() == 1;
  });
  EXPECT_TRUE(eventually([&] {
    return admin.call(ipc::op::kStats).body["broker"]["requests_total"].get<int>() >= 4;
  }));
  admin.call(ipc::op::kShutdown);
  // Not accepting any more: the socket is gone while the load is still pending.
  EXPECT_TRUE(eventually([&] { return ::access(server.path().c_str(), F_OK) != 0; }));
  server.handler().release_replies();
  load.join();
  EXPECT_TRUE(loaded);
  server.join();
}

TEST(Broker, ADeferredReplyToAClientThatLeftIsDroppedWithItsFds) {
  InProcessBroker server;
  const int baseline = count_open_fds();
  server.handler().hold_replies();
  {
    UniqueFd socket = raw_connect(server.path());
    raw_hello(socket.get());
    ipc::send_frame(socket.get(), ipc::make_request(ipc::op::kLoad, 2));
    EXPECT_TRUE(eventually([&] { return server.handler().connects().size() == 1; }));
  }
  EXPECT_TRUE(eventually([&] { return server.handler().disconnects().size() == 1; }));
  server.handler().release_replies();
  EXPECT_TRUE(eventually([&] { return server.handler().late_completions_refused() == 1; }));
  EXPECT_TRUE(eventually([&] { return count_open_fds() == baseline; }));
}

TEST(Broker, ADisconnectEndsTheClientsLease) {
  InProcessBroker server;
  std::optional<ipc::Client> worker = server.client("worker");
  const std::vector<std::uint64_t> ids = {1, 2};
  worker->import_allocations("test", ids);
  EXPECT_EQ(server.handler().leases(), 1);
  worker.reset();
  EXPECT_TRUE(eventually([&] { return server.handler().leases() == 0; }));
  const auto gone = server.handler().disconnects();
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].pid, ::getpid());
}

}  // namespace
}  // namespace hearth::test
