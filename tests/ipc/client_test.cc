#include "ipc/client.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include <atomic>
#include <functional>
#include <thread>

#include "ipc/errors.h"
#include "ipc/frame.h"
#include "ipc/protocol.h"
#include "ipc/unix_socket.h"
#include "test_util.h"

namespace hearth::ipc {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// A hand-written server for one connection, so the client is tested without the broker: it
// answers hello, then runs `serve` on the accepted socket in a thread.
class FakeServer {
 public:
  using Serve = std::function<void(int socket)>;

  explicit FakeServer(Serve serve, bool answer_hello = true)
      : listener_(UnixListener::listen(tmp_ / "hearth.sock")) {
    thread_ = std::thread([this, serve = std::move(serve), answer_hello] {
      UniqueFd socket;
      while (!(socket = listener_.accept()).valid()) std::this_thread::sleep_for(1ms);
      try {
        if (answer_hello) {
          auto hello = receive_frame(socket.get());
          const Request request = parse_request(std::move(hello->body));
          send_frame(socket.get(), make_ok_reply(request.id, {{"version", kProtocolVersion},
                                                              {"server", "fake"},
                                                              {"client_id", 1},
                                                              {"admin", true}}));
        }
        serve(socket.get());
      } catch (const std::exception& e) {
        ADD_FAILURE() << "fake server: " << e.what();
      }
    });
  }
  ~FakeServer() { thread_.join(); }

  std::string path() const { return listener_.path(); }

 private:
  test::TempDir tmp_;
  UnixListener listener_;
  std::thread thread_;
};

// Answers each request with reply(request) and the FDs it returns, until the client hangs up.
void answer_each(int socket,
                 const std::function<json(const Request&, std::vector<UniqueFd>&)>& reply) {
  while (auto frame = receive_frame(socket)) {
    const Request request = parse_request(std::move(frame->body));
    std::vector<UniqueFd> fds;
    const json body = reply(request, fds);
    std::vector<int> raw;
    for (const UniqueFd& fd : fds) raw.push_back(fd.get());
    send_frame(socket, body, raw);
  }
}

TEST(Client, ConnectsAndSaysHello) {
  FakeServer server([](int socket) { EXPECT_FALSE(receive_frame(socket)); });
  ClientOptions options;
  options.name = "test-client";
  Client client = Client::connect(server.path(), options);
  EXPECT_TRUE(client.connected());
  EXPECT_EQ(client.server_hello()["server"], "fake");
  EXPECT_EQ(client.server_hello()["version"], kProtocolVersion);
}

TEST(Client, SaysClearlyThatNoServerIsRunning) {
  test::TempDir tmp;
  try {
    Client::connect(tmp / "hearth.sock");
    FAIL();
  } catch (const ServerNotRunning& e) {
    EXPECT_NE(std::string(e.what()).find("server not running at " + (tmp / "hearth.sock").string()),
              std::string::npos);
  }
}

TEST(Client, RefusesAServerSpeakingAnotherVersion) {
  FakeServer server(
      [](int socket) {
        auto hello = receive_frame(socket);
        EXPECT_EQ(hello->body["version"], kProtocolVersion);
        EXPECT_EQ(hello->body["op"], "hello");
        send_frame(socket, make_ok_reply(hello->body["id"].get<RequestId>(),
                                         {{"version", kProtocolVersion + 1}}));
      },
      /*answer_hello=*/false);
  try {
    Client::connect(server.path());
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kVersionMismatch);
  }
}

TEST(Client, ReportsWhyTheServerRefusedTheConnection) {
  FakeServer server(
      [](int socket) {
        send_frame(socket, make_error_reply(std::nullopt, ErrorCode::kUnauthorized,
                                            "uid 0 is not allowed to use this server"));
      },
      /*answer_hello=*/false);
  try {
    Client::connect(server.path());
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnauthorized);
    EXPECT_NE(e.message().find("not allowed"), std::string::npos);
  }
}

TEST(Client, AnErrorReplyThrowsAndLeavesTheConnectionUsable) {
  FakeServer server([](int socket) {
    answer_each(socket, [](const Request& request, std::vector<UniqueFd>&) {
      if (request.op == "manifest") {
        return make_error_reply(request.id, ErrorCode::kNotFound, "no model 'x'");
      }
      return make_ok_reply(request.id, {{"op_was", request.op}});
    });
  });
  Client client = Client::connect(server.path());
  try {
    client.call(op::kManifest, {{"model", "x"}});
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_EQ(e.message(), "no model 'x'");
  }
  EXPECT_TRUE(client.connected());
  EXPECT_EQ(client.call(op::kStats).body["op_was"], "stats");
}

TEST(Client, AReplyWithTheWrongIdClosesTheConnection) {
  FakeServer server([](int socket) {
    auto frame = receive_frame(socket);
    send_frame(socket, make_ok_reply(frame->body["id"].get<RequestId>() + 100));
    EXPECT_FALSE(receive_frame(socket));
  });
  Client client = Client::connect(server.path());
  EXPECT_THROW(client.call(op::kStats), IpcError);
  EXPECT_FALSE(client.connected());
  EXPECT_THROW(client.call(op::kStats), ConnectionClosed);
}

TEST(Client, TimesOutOnASilentServer) {
  FakeServer server([](int socket) {
    EXPECT_TRUE(receive_frame(socket));  // the request, never answered
    EXPECT_FALSE(receive_frame(socket));
  });
  ClientOptions options;
  options.timeout = 100ms;
  Client client = Client::connect(server.path(), options);
  EXPECT_THROW(client.call(op::kStats), TimeoutError);
  EXPECT_FALSE(client.connected());
}

TEST(Client, ReportsAServerThatHangsUp) {
  FakeServer server([](int socket) { ::shutdown(socket, SHUT_RDWR); });
  Client client = Client::connect(server.path());
  EXPECT_THROW(client.call(op::kStats), ConnectionClosed);
}

TEST(Client, ImportsInBatchesOfAtMost250) {
  std::vector<std::size_t> batch_sizes;
  FakeServer server([&](int socket) {
    answer_each(socket, [&](const Request& request, std::vector<UniqueFd>& fds) {
      const ImportRequest import = parse_import_request(request);
      batch_sizes.push_back(import.allocations.size());
      for (std::uint64_t id : import.allocations) {
        fds.push_back(test::make_memfd("allocation " + std::to_string(id)));
      }
      return make_ok_reply(request.id, make_import_result(import.allocations));
    });
  });
  std::vector<std::uint64_t> ids(520);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = 1000 + i;
  std::vector<UniqueFd> fds;
  {
    Client client = Client::connect(server.path());
    fds = client.import_allocations("tiny", ids);
  }
  EXPECT_EQ(batch_sizes, (std::vector<std::size_t>{250, 250, 20}));
  ASSERT_EQ(fds.size(), ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(test::read_all(fds[i].get()), "allocation " + std::to_string(ids[i]));
  }
}

TEST(Client, AShortImportFailsAndClosesWhatArrived) {
  const int baseline = test::count_open_fds();
  {
    FakeServer server([](int socket) {
      answer_each(socket, [](const Request& request, std::vector<UniqueFd>& fds) {
        const ImportRequest import = parse_import_request(request);
        fds.push_back(test::make_memfd("only one"));
        return make_ok_reply(request.id, make_import_result(import.allocations));
      });
    });
    Client client = Client::connect(server.path());
    const std::vector<std::uint64_t> ids = {1, 2, 3};
    EXPECT_THROW(client.import_allocations("tiny", ids), IpcError);
  }
  EXPECT_EQ(test::count_open_fds(), baseline);
}

TEST(Client, RefusesAServerThatDoesNotRunAsTheExpectedUid) {
  test::TempDir tmp;
  UnixListener listener = UnixListener::listen(tmp / "hearth.sock");  // never answers
  ClientOptions options;
  options.server_uid = ::geteuid() + 1;
  try {
    Client::connect(listener.path(), options);
    FAIL() << "connected to a server of the wrong uid";
  } catch (const IpcError& e) {
    EXPECT_NE(
        std::string(e.what()).find("runs as uid " + std::to_string(::geteuid()) +
                                   ", not as the expected uid " + std::to_string(::geteuid() + 1)),
        std::string::npos)
        << e.what();
  }
  FakeServer server([](int) {});
  options.server_uid = ::geteuid();
  EXPECT_EQ(Client::connect(server.path(), options).server_hello()["server"], "fake");
}

// A server run by another uid, in a directory under a 0711 parent: listens as `uid` at
// `dir`/hearth.sock until destroyed.
class ForeignServer {
 public:
  ForeignServer(const std::string& dir, uid_t uid) : path_(dir + "/hearth.sock") {
    pid_ = ::fork();
    if (pid_ == 0) {
      if (::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(2);
      UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM, 0));
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
      if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
          ::listen(fd.get(), 8) != 0)
        ::_exit(3);
      for (;;) ::pause();
    }
  }
  ~ForeignServer() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  // Connected once the server listens.
  UniqueFd connect() const {
    for (int i = 0; i < 2000; ++i) {
      try {
        return connect_unix(path_);
      } catch (const IpcError&) {
        std::this_thread::sleep_for(5ms);
      }
    }
    throw std::runtime_error("the foreign server never listened");
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  pid_t pid_ = -1;
};

// The default policy with a server of another uid; setting that up needs root.
TEST(Client, TrustsAnotherUidsServerOnlyInADirectoryOnlyItCanWrite) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a server as another uid";
  constexpr uid_t kNobody = 65534;
  test::TempDir tmp;
  ASSERT_EQ(::chmod(tmp.path().c_str(), 0711), 0);

  const std::string owned = tmp / "owned";  // the server's own 0711 directory: trusted
  ASSERT_EQ(::mkdir(owned.c_str(), 0711), 0);
  ASSERT_EQ(::chown(owned.c_str(), kNobody, kNobody), 0);
  {
    ForeignServer server(owned, kNobody);
    UniqueFd socket = server.connect();
    EXPECT_NO_THROW(check_server_uid(socket.get(), server.path(), std::nullopt));
  }

  const std::string open = tmp / "open";  // like /tmp: anyone could have put a socket there
  ASSERT_EQ(::mkdir(open.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(open.c_str(), 01777), 0);
  ForeignServer server(open, kNobody);
  UniqueFd socket = server.connect();
  try {
    check_server_uid(socket.get(), server.path(), std::nullopt);
    ADD_FAILURE() << "trusted a server in a directory anyone can write to";
  } catch (const IpcError& e) {
    EXPECT_NE(std::string(e.what()).find("runs as uid 65534: not this process's uid (0), not "
                                         "root, and not the owner of a socket directory"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--server-uid 65534"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(check_server_uid(socket.get(), server.path(), kNobody));  // named: trusted
}

}  // namespace
}  // namespace hearth::ipc
