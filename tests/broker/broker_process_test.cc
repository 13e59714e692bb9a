// The broker as its own process (broker_test_helper), so that its descriptors can be counted
// from outside and it can be signalled and killed like the real server.

#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "broker_test_support.h"
#include "tests/support/send_with_fds.h"

namespace hearth::test {
namespace {

using ipc::ErrorCode;
using nlohmann::json;

class ServerProcess {
 public:
  explicit ServerProcess(int idle_ms = 10'000)
      : path_(tmp_ / "run/hearth.sock"),
        process_(start_helper({"server", path_, std::to_string(idle_ms)})) {
    ready_ = read_line(process_) == "READY";
  }
  bool ready() const { return ready_; }
  const std::string& path() const { return path_; }
  ChildProcess& process() { return process_; }
  int open_fds() { return count_open_fds(process_.pid()); }

  ipc::Client client(const std::string& name = "test-client") const {
    ipc::ClientOptions options;
    options.name = name;
    options.timeout = kPatience;
    return ipc::Client::connect(path_, options);
  }

 private:
  TempDir tmp_;
  std::string path_;
  ChildProcess process_;
  bool ready_ = false;
};

// Resident set size of a process in KiB, from /proc/PID/status.
long rss_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

int stat_value(ipc::Client& client, const char* key) {
  return client.call(ipc::op::kStats).body["broker"][key].get<int>();
}

TEST(BrokerProcess, SigtermShutsDownGracefullyAndRemovesTheSocket) {
  ServerProcess server;
  ASSERT_TRUE(server.ready());
  ipc::Client client = server.client();
  EXPECT_EQ(client.call(ipc::op::kList).body["models"], json({"test"}));
  server.process().signal(SIGTERM);
  const ExitStatus status = server.process().wait();
  EXPECT_TRUE(status.success()) << status.describe();
  EXPECT_NE(::access(server.path().c_str(), F_OK), 0);
  EXPECT_THROW(client.call(ipc::op::kList), ipc::ConnectionClosed);
  EXPECT_THROW(server.client(), ipc::ServerNotRunning);
}

TEST(BrokerProcess, SigintShutsDownToo) {
  ServerProcess server;
  ASSERT_TRUE(server.ready());
  server.process().signal(SIGINT);
  const ExitStatus status = server.process().wait();
  EXPECT_TRUE(status.success()) << status.describe();
  EXPECT_NE(::access(server.path().c_str(), F_OK), 0);
}

TEST(BrokerProcess, AKilledServersSocketIsReplacedByTheNextServer) {
  TempDir tmp;
  const std::string path = tmp / "run/hearth.sock";
  {
    ChildProcess first = start_helper({"server", path});
    ASSERT_EQ(read_line(first), "READY");
    first.kill_group();
    first.wait();
  }
  EXPECT_EQ(::access(path.c_str(), F_OK), 0);  // left behind
  EXPECT_THROW(ipc::Client::connect(path), ipc::ServerNotRunning);
  ChildProcess second = start_helper({"server", path});
  ASSERT_EQ(read_line(second), "READY");
  ipc::Client client = ipc::Client::connect(path);
  EXPECT_EQ(client.call(ipc::op::kList).body["models"], json({"test"}));
}

TEST(BrokerProcess, ALiveServerIsNotStolen) {
  ServerProcess server;
  ASSERT_TRUE(server.ready());
  ChildProcess intruder = start_helper({"server", server.path()});
  const ExitStatus status = intruder.wait();
  EXPECT_TRUE(status.exited_with(1)) << status.describe();
  ipc::Client client = server.client();
  EXPECT_EQ(client.call(ipc::op::kList).body["models"], json({"test"}));
}

TEST(BrokerProcess, AKilledWorkersLeaseIsReleased) {
  ServerProcess server;
  ASSERT_TRUE(server.ready());
  ipc::Client observer = server.client("observer");
  ChildProcess worker = start_helper({"hold", server.path()});
  const std::string held = read_line(worker);
  ASSERT_EQ(held.rfind("HELD ", 0), 0u) << held;
  EXPECT_EQ(observer.call(ipc::op::kStats).body["leases"], 1);
  worker.kill_group();
  worker.wait();
  EXPECT_TRUE(eventually([&] { return observer.call(ipc::op::kStats).body["leases"] == 0; }));
  EXPECT_EQ(stat_value(observer, "clients"), 1);
}

TEST(BrokerProcess, AThousandConnectImportDisconnectCyclesLeaveNothingBehind) {
  ServerProcess server;
  ASSERT_TRUE(server.ready());
  const std::vector<std::uint64_t> ids = {1, 2, 3};
  auto cycle = [&] {
    ipc::Client client = server.client("cycle");
    std::vector<UniqueFd> fds = client.import_allocations("test", ids);
    ASSERT_EQ(fds.size(), 3u);
    ASSERT_EQ(read_all(fds[2].get()), "allocation 3");
    client.call(ipc::op::kRelease, {{"model", "test"}});
  };
  const int baseline_fds = server.open_fds();
  ASSERT_GT(baseline_fds, 0);
  // RSS is measured after a warm-up, once the allocator has its working set.
  for (int i = 0; i < 100; ++i) cycle();
  ASSERT_TRUE(eventually([&] { return server.open_fds() == baseline_fds; }));
  const long baseline_rss = rss_kib(server.process().pid());
  for (int i = 0; i < 1000; ++i) cycle();

  EXPECT_TRUE(eventually([&] { return server.open_fds() == baseline_fds; }))
      << server.open_fds() << " open, baseline " << baseline_fds;
  const long rss = rss_kib(server.process().pid());
  RecordProperty("rss_kib_before", std::to_string(baseline_rss));
  RecordProperty("rss_kib_after", std::to_string(rss));
#if !defined(__SANITIZE_ADDRESS__)  // ASan's quarantine holds freed memory on purpose
  EXPECT_LT(rss - baseline_rss, 4 * 1024) << baseline_rss << " KiB -> " << rss << " KiB";
#endif
  ipc::Client client = server.client();
  EXPECT_EQ(stat_value(client, "connections_total"), 1101);
  EXPECT_EQ(stat_value(client, "dropped_total"), 0);
  EXPECT_EQ(client.call(ipc::op::kStats).body["leases"], 0);
}

// Every kind of garbage against one server process: each connection gets an error and/or is
// closed, a bystander is served throughout, and the server ends with the descriptors it
// started with.
TEST(BrokerProcess, GarbageLeavesTheServerServingAndLeaksNothing) {
  ServerProcess server(/*idle_ms=*/1000);
  ASSERT_TRUE(server.ready());
  const int baseline = server.open_fds();
  ipc::Client bystander = server.client("bystander");

  auto expect_rejected = [&](const std::string& what, const std::function<void(int)>& misbehave) {
    SCOPED_TRACE(what);
    UniqueFd socket = raw_connect(server.path());
    misbehave(socket.get());
    const Outcome outcome = outcome_of(socket.get());
    EXPECT_TRUE(outcome.closed);
    if (outcome.error) {
      EXPECT_FALSE(outcome.error->ok);
    }
    EXPECT_EQ(bystander.call(ipc::op::kList).body["models"], json({"test"}));
  };

  std::mt19937 rng(99);
  for (int round = 0; round < 10; ++round) {
    expect_rejected("random bytes", [&](int s) {
      std::string noise(4096, '\0');
      for (char& c : noise) c = static_cast<char>(rng());
      write_all(s, noise);
    });
  }
  expect_rejected("4 GiB length", [](int s) { write_all(s, header(0xffffffffu)); });
  expect_rejected("truncated frame", [](int s) {
    write_all(s, header(50) + "{\"op\":\"hel");
    ::shutdown(s, SHUT_WR);
  });
  expect_rejected("stalled frame", [](int s) { write_all(s, header(50) + "{\"op\":\"hel"); });
  expect_rejected("invalid JSON", [](int s) { write_all(s, header(5) + "{{{{{"); });
  expect_rejected("not an object", [](int s) { write_all(s, header(2) + "[]"); });
  expect_rejected("deeply nested", [](int s) {
    std::string deep;
    for (int i = 0; i < 10000; ++i) deep += "{\"a\":";
    deep += "1" + std::string(10000, '}');
    write_all(s, header(static_cast<std::uint32_t>(deep.size())) + deep);
  });
  expect_rejected("fds attached", [](int s) {
    raw_hello(s);
    UniqueFd a = make_memfd("a");
    ipc::send_frame(s, ipc::make_request(ipc::op::kList, 2), std::vector<int>{a.get()});
  });
  expect_rejected("251 fds attached", [](int s) {
    raw_hello(s);
    std::vector<UniqueFd> files;
    std::vector<int> raw;
    for (int i = 0; i < 251; ++i) {
      files.push_back(make_memfd("x"));
      raw.push_back(files.back().get());
    }
    const std::string frame = ipc::encode_frame(ipc::make_request(ipc::op::kList, 2));
    ASSERT_GT(test::send_with_fds(s, frame, raw, MSG_NOSIGNAL), 0);
  });
  expect_rejected("never speaks", [](int) {});
  expect_rejected("stops reading", [&](int s) {
    raw_hello(s);
    const int dropped_before = stat_value(bystander, "dropped_total");
    for (int i = 0; i < 100; ++i) {
      write_all(
          s, ipc::encode_frame(ipc::make_request(ipc::op::kStats, 10 + i, {{"pad", 256 * 1024}})));
    }
    // Reading now would let the server make progress again; first let it give up on us.
    EXPECT_TRUE(
        eventually([&] { return stat_value(bystander, "dropped_total") > dropped_before; }));
  });

  const int dropped = stat_value(bystander, "dropped_total");
  EXPECT_GE(dropped, 20);
  bystander.close();
  EXPECT_TRUE(eventually([&] { return server.open_fds() == baseline; }))
      << server.open_fds() << " open, baseline " << baseline;
}

}  // namespace
}  // namespace hearth::test
