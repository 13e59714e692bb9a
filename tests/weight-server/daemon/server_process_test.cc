// hearth-server and hearth-worker as real processes on real sockets, with the memfd backend
// and the CPU engine (what CI runs): concurrent workers against single-process mode, workers
// and servers killed mid-generation, garbage on the socket, 1000 attach cycles without leaks,
// admin uid checks and socket permissions.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <random>

#include "ipc/frame.h"
#include "ipc/protocol.h"
#include "ipc/unix_socket.h"
#include "server_test_support.h"
#include "weight-server/sharing/model_import.h"

namespace hearth {
namespace {

using json = nlohmann::json;
using test::ServerProcess;
using test::WorkerRun;

// Single-process runs of the shared generation arguments, computed once per seed.
class References {
 public:
  const WorkerRun& get(int seed, int max_tokens, bool ignore_eos = false) {
    const auto key = std::tuple(seed, max_tokens, ignore_eos);
    auto it = runs_.find(key);
    if (it == runs_.end()) {
      WorkerRun run =
          test::run_worker(tmp_, test::concat({"--model", test::tiny_model_dir().string()},
                                              test::generation_args(seed, max_tokens, ignore_eos)));
      it = runs_.emplace(key, std::move(run)).first;
    }
    EXPECT_TRUE(it->second.status.success()) << it->second.err;
    return it->second;
  }

 private:
  test::TempDir tmp_;
  std::map<std::tuple<int, int, bool>, WorkerRun> runs_;
};

References& references() {
  static References refs;
  return refs;
}

// hearth-worker arguments for served mode, without the program.
std::vector<std::string> served_args(const ServerProcess& server, int seed, int max_tokens,
                                     bool ignore_eos = false) {
  return test::concat({"--server", server.socket(), "--model", "tiny"},
                      test::generation_args(seed, max_tokens, ignore_eos));
}

std::vector<std::string> served(const ServerProcess& server, int seed, int max_tokens,
                                bool ignore_eos = false) {
  return test::concat({test::binary("hearth-worker")},
                      served_args(server, seed, max_tokens, ignore_eos));
}

void expect_same_stream(const std::string& got, const WorkerRun& want, const std::string& what) {
  const test::Stream a = test::parse_stream(got), b = test::parse_stream(want.out);
  EXPECT_FALSE(a.tokens.empty()) << what;
  EXPECT_EQ(a.tokens, b.tokens) << what;
  EXPECT_EQ(a.done["stop"], b.done["stop"]) << what;
  EXPECT_EQ(a.done["generated_tokens"], b.done["generated_tokens"]) << what;
}

// A served worker whose stdout is read through a one-page pipe: once it is a few dozen tokens
// ahead of the reader it blocks, mid-generation, still holding its lease.
std::unique_ptr<ChildProcess> start_stalled_worker(const ServerProcess& server, int seed,
                                                   int max_tokens) {
  return std::make_unique<ChildProcess>(
      test::start_piped(served(server, seed, max_tokens, /*ignore_eos=*/true)));
}

int lease_count(ServerProcess& server) {
  return server.stats()["leases"].get<int>();
}

TEST(ServerProcess, SixteenConcurrentWorkersMatchSingleProcessMode) {
  ServerProcess server;
  constexpr int kWorkers = 16, kTokens = 24;
  const int connections_before = server.stats()["broker"]["connections_total"].get<int>();
  test::TempDir out;
  std::vector<ChildProcess> workers;
  for (int i = 0; i < kWorkers; ++i) {
    workers.push_back(ChildProcess::spawn(
        ChildProcess::Options(served(server, i % 4, kTokens))
            .stdout_to(ChildProcess::Stream::file(out / ("w" + std::to_string(i) + ".out")))
            .stderr_to(ChildProcess::Stream::file(out / ("w" + std::to_string(i) + ".err")))));
  }
  for (int i = 0; i < kWorkers; ++i) {
    const ExitStatus status = workers[i].wait();
    EXPECT_TRUE(status.success()) << "worker " << i << ": " << status.describe() << "\n"
                                  << test::read_file(out / ("w" + std::to_string(i) + ".err"));
    expect_same_stream(test::read_file(out / ("w" + std::to_string(i) + ".out")),
                       references().get(i % 4, kTokens), "worker " + std::to_string(i));
  }
  // Different seeds gave different streams: the comparison above is not trivially true.
  EXPECT_NE(test::parse_stream(references().get(0, kTokens).out).tokens,
            test::parse_stream(references().get(1, kTokens).out).tokens);
  const json stats = server.stats();
  EXPECT_EQ(stats["leases"], 0);
  EXPECT_EQ(stats["leases_total"], kWorkers);
  EXPECT_EQ(stats["broker"]["connections_total"].get<int>(), connections_before + kWorkers + 1);
}

TEST(ServerProcess, WorkerKilledMidGenerationReleasesItsLease) {
  ServerProcess server;
  auto worker = start_stalled_worker(server, 5, 400);
  ASSERT_TRUE(test::next_line(*worker)) << "the worker produced no token\n" << server.log();
  json stats = server.stats();
  ASSERT_EQ(stats["leases"], 1);
  ASSERT_EQ(stats["workers"][0]["pid"], worker->pid());
  EXPECT_TRUE(worker->running()) << "expected the worker to be stalled mid-generation";

  const pid_t pid = worker->pid();
  worker->kill_group();
  worker->wait();
  EXPECT_TRUE(test::eventually([&] { return lease_count(server) == 0; })) << server.stats().dump();
  stats = server.stats();
  EXPECT_TRUE(stats["workers"].empty());
  EXPECT_EQ(stats["clients"], 1);  // only the stats connection itself
  EXPECT_NE(server.log().find("pid " + std::to_string(pid) + ") on 'tiny' ended: disconnected"),
            std::string::npos);
  // Healthy: the next worker gets the same stream as single-process mode.
  test::TempDir tmp;
  const WorkerRun again = test::run_worker(tmp, served_args(server, 5, 16));
  EXPECT_TRUE(again.status.success()) << again.err;
  expect_same_stream(again.out, references().get(5, 16), "worker after the kill");
  EXPECT_TRUE(server.process().running());
}

TEST(ServerProcess, WorkersFinishTheirStreamsWhenTheServerIsKilled) {
  constexpr int kWorkers = 3, kTokens = 160;  // the one-page pipe stalls a worker after ~60
  auto server = std::make_unique<ServerProcess>();
  const std::string socket = server->socket();
  std::vector<std::unique_ptr<ChildProcess>> workers;
  std::vector<std::string> first_lines;
  for (int i = 0; i < kWorkers; ++i)
    workers.push_back(start_stalled_worker(*server, 10 + i, kTokens));
  for (auto& w : workers) {
    auto line = test::next_line(*w);
    ASSERT_TRUE(line) << "a worker produced no token";
    first_lines.push_back(*line + "\n");
  }
  ASSERT_EQ(lease_count(*server), kWorkers);
  for (auto& w : workers) EXPECT_TRUE(w->running()) << "expected every worker mid-generation";

  server->process().signal(SIGKILL);
  server->process().wait();

  for (int i = 0; i < kWorkers; ++i) {
    const std::string out = first_lines[i] + test::rest_of_output(*workers[i]);
    const ExitStatus status = workers[i]->wait();
    EXPECT_TRUE(status.success()) << "worker " << i << ": " << status.describe();
    const test::Stream stream = test::parse_stream(out);
    EXPECT_EQ(stream.tokens.size(), size_t(kTokens)) << "worker " << i;
    expect_same_stream(out, references().get(10 + i, kTokens, true), "worker " + std::to_string(i));
  }

  // The socket file is left behind by the killed server: new workers get a clear error.
  test::TempDir tmp;
  const WorkerRun late =
      test::run_worker(tmp, {"--server", socket, "--model", "tiny", "--prompt", "hi"});
  EXPECT_TRUE(late.status.exited_with(1)) << late.status.describe();
  EXPECT_NE(late.err.find("hearth-worker: error: hearth server not running at " + socket),
            std::string::npos)
      << late.err;
}

TEST(ServerProcess, GarbageOnTheSocketLeavesTheServerServing) {
  ServerProcess server;
  auto outcome = [&](const std::function<void(int)>& send) {
    UniqueFd s = ipc::connect_unix(server.socket());
    send(s.get());
    ipc::ReceiveOptions options;
    options.timeout = std::chrono::seconds(20);
    std::optional<ipc::ReplyStatus> error;
    bool closed = false;
    // Every case ends with the server closing the connection (after an error reply, or on
    // the client's own shutdown); a timeout means it did not.
    for (;;) {
      try {
        auto frame = ipc::receive_frame(s.get(), options);
        if (!frame) {
          closed = true;
          break;
        }
        const ipc::ReplyStatus status = ipc::parse_reply_status(frame->body);
        if (!status.ok && !error) error = status;
      } catch (const ipc::TimeoutError&) {
        break;
      } catch (const ipc::IpcError&) {
        closed = true;  // reset, or cut mid-frame
        break;
      }
    }
    return std::pair(error, closed);
  };
  auto raw = [](int s, const std::string& bytes) {
    ::send(s, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  };
  auto header = [](uint32_t n) { return std::string(reinterpret_cast<const char*>(&n), 4); };

  std::mt19937 rng(1234);
  std::string noise(4096, '\0');
  for (char& c : noise) c = char(rng());
  auto [e1, c1] = outcome([&](int s) { raw(s, noise); });
  EXPECT_TRUE(c1);
  auto [e2, c2] = outcome([&](int s) { raw(s, header(0xffffffffu)); });
  ASSERT_TRUE(e2);
  EXPECT_EQ(e2->code, ipc::ErrorCode::kTooLarge);
  EXPECT_TRUE(c2);
  auto [e3, c3] = outcome([&](int s) { raw(s, header(9) + "{\"op\": ]]"); });
  ASSERT_TRUE(e3);
  EXPECT_TRUE(c3);
  EXPECT_EQ(e3->code, ipc::ErrorCode::kBadRequest);
  // Well-formed frames with requests this server cannot satisfy: error replies, connection kept.
  auto [e4, c4] = outcome([&](int s) {
    ipc::send_frame(s, ipc::make_request(ipc::op::kHello, 1, ipc::make_hello_args("garbage")));
    ipc::send_frame(s, ipc::make_request(ipc::op::kImport, 2,
                                         {{"model", "tiny"}, {"allocations", {1u << 30}}}));
    ::shutdown(s, SHUT_WR);
  });
  ASSERT_TRUE(e4);
  EXPECT_EQ(e4->code, ipc::ErrorCode::kNotFound);
  EXPECT_NE(e4->message.find("has no allocation 1073741824"), std::string::npos) << e4->message;
  EXPECT_TRUE(c4);
  // A request with descriptors attached where none belong.
  auto [e5, c5] = outcome([&](int s) {
    ipc::send_frame(s, ipc::make_request(ipc::op::kHello, 1, ipc::make_hello_args("garbage")));
    UniqueFd stray = test::make_memfd("stray");
    const int fds[] = {stray.get()};
    ipc::send_frame(s, ipc::make_request(ipc::op::kManifest, 2, {{"model", "tiny"}}), fds);
  });
  ASSERT_TRUE(e5);
  EXPECT_EQ(e5->code, ipc::ErrorCode::kBadRequest);
  EXPECT_TRUE(c5);

  // Everything above hurt only its own connection.
  EXPECT_TRUE(server.process().running());
  test::TempDir tmp;
  const WorkerRun run = test::run_worker(tmp, served_args(server, 1, 8));
  EXPECT_TRUE(run.status.success()) << run.err;
  expect_same_stream(run.out, references().get(1, 8), "worker after the garbage");
  EXPECT_EQ(server.stats()["leases"], 0);
}

TEST(ServerProcess, ThousandAttachCyclesLeakNothing) {
  ServerProcess server;
  const pid_t pid = server.pid();
  const int own_fds = test::count_open_fds();
  const int own_maps = test::count_memfd_maps();
  auto cycle = [&] {
    ipc::Client client = test::connect_client(server.socket(), "cycle");
    ImportedModel model = import_served_model(client, "tiny");
    ASSERT_EQ(model.store->tensors().size(), model.manifest.tensors.size());
  };
  ipc::Client observer = test::connect_client(server.socket(), "observer");
  auto idle = [&] { return observer.call(ipc::op::kStats).body["clients"] == 1; };
  // RSS is measured after a warm-up, once the allocator has its working set.
  for (int i = 0; i < 50; ++i) cycle();
  ASSERT_TRUE(test::eventually(idle));
  const int baseline_fds = test::count_fds(pid);
  const long baseline_rss = test::rss_kib(pid);
  for (int i = 0; i < 1000; ++i) cycle();
  ASSERT_TRUE(test::eventually(idle));
  EXPECT_TRUE(test::eventually([&] { return test::count_fds(pid) == baseline_fds; }))
      << baseline_fds << " -> " << test::count_fds(pid);
  const long rss = test::rss_kib(pid);
  RecordProperty("server_rss_kib_before", std::to_string(baseline_rss));
  RecordProperty("server_rss_kib_after", std::to_string(rss));
#if !defined(__SANITIZE_ADDRESS__)  // ASan's quarantine holds freed memory on purpose
  EXPECT_LT(rss - baseline_rss, 4 * 1024) << baseline_rss << " KiB -> " << rss << " KiB";
#endif
  const json stats = observer.call(ipc::op::kStats).body;
  EXPECT_EQ(stats["leases"], 0);
  EXPECT_EQ(stats["leases_total"], 1050);
  // This side too: every descriptor closed, every mapping gone.
  EXPECT_EQ(test::count_open_fds(), own_fds + 1);  // + the observer
  EXPECT_EQ(test::count_memfd_maps(), own_maps);
}

TEST(ServerProcess, AdminOpsNeedTheAdminUid) {
  ServerProcess server({"--backend", "memfd", "--model", test::tiny_model_dir().string() + ":tiny",
                        "--admin-uid", std::to_string(::geteuid() + 1)});
  ipc::Client client = test::connect_client(server.socket());
  EXPECT_EQ(client.server_hello()["admin"], false);
  for (std::string_view op : {ipc::op::kLoad, ipc::op::kUnload, ipc::op::kShutdown}) {
    try {
      client.call(op, {{"dir", test::tiny_model_dir().string()}, {"model", "tiny"}});
      ADD_FAILURE() << op << " was allowed";
    } catch (const ipc::ProtocolError& e) {
      EXPECT_EQ(e.code(), ipc::ErrorCode::kUnauthorized) << op;
      EXPECT_NE(e.message().find("only uid " + std::to_string(::geteuid() + 1)), std::string::npos)
          << e.message();
    }
  }
  EXPECT_EQ(client.call(ipc::op::kList).body["models"].size(), 1u);
}

TEST(ServerProcess, AdminShutdownIsGraceful) {
  ServerProcess server;
  ipc::Client admin = test::connect_client(server.socket());
  EXPECT_EQ(admin.server_hello()["admin"], true);
  EXPECT_EQ(admin.call(ipc::op::kShutdown).body["stopping"], true);
  EXPECT_TRUE(server.process().wait().success()) << server.log();
  struct stat st {};
  EXPECT_NE(::stat(server.socket().c_str(), &st), 0) << "the socket file should be gone";
}

TEST(ServerProcess, CtlListsLoadsUnloadsAndStopsTheServer) {
  ServerProcess server;
  auto ctl = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"--socket", server.socket()});
    return test::run_binary("hearth-ctl", server.dir(), args);
  };
  auto served_names = [&] {
    const test::WorkerRun run = ctl({"list"});
    EXPECT_TRUE(run.status.success()) << run.err;
    const json reply = json::parse(run.out);
    std::vector<std::string> names;
    for (const json& m : reply["models"]) names.push_back(m["name"]);
    return names;
  };
  EXPECT_EQ(served_names(), std::vector<std::string>{"tiny"});

  test::WorkerRun run = ctl({"load", test::tiny_model_dir().string(), "--name", "second"});
  ASSERT_TRUE(run.status.success()) << run.err;
  EXPECT_EQ(json::parse(run.out)["model"]["name"], "second");
  EXPECT_EQ(served_names(), (std::vector<std::string>{"second", "tiny"}));
  run = ctl({"stats"});
  EXPECT_TRUE(run.status.success()) << run.err;
  EXPECT_EQ(json::parse(run.out)["pid"], server.pid());

  auto refused = [](const test::WorkerRun& r) { return r.status.exited_with(1); };
  run = ctl({"unload", "nosuch"});
  EXPECT_TRUE(refused(run)) << run.status.describe();
  EXPECT_NE(run.err.find("hearth-ctl: error: "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("nosuch"), std::string::npos) << run.err;
  run = ctl({"unload", "second"});
  EXPECT_TRUE(run.status.success()) << run.err;
  EXPECT_EQ(served_names(), std::vector<std::string>{"tiny"});

  run = ctl({"shutdown"});
  EXPECT_TRUE(run.status.success()) << run.err;
  EXPECT_TRUE(server.process().wait().success()) << server.log();
  run = ctl({"list"});
  EXPECT_TRUE(refused(run)) << run.status.describe();
  EXPECT_NE(run.err.find("not running"), std::string::npos) << run.err;
}

TEST(ServerProcess, LiftsItsSoftDescriptorLimitToTheHardOne) {
  rlimit own{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &own), 0);
  rlimit lowered = own;
  lowered.rlim_cur = std::min<rlim_t>(own.rlim_max, 256);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);
  ServerProcess server;  // inherits the lowered soft limit
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &own), 0);

  std::string soft, hard;
  std::istringstream limits(test::read_file("/proc/" + std::to_string(server.pid()) + "/limits"));
  for (std::string line; std::getline(limits, line);)
    if (line.rfind("Max open files", 0) == 0)
      std::istringstream(line.substr(std::strlen("Max open files"))) >> soft >> hard;
  ASSERT_FALSE(hard.empty()) << "no 'Max open files' line";
  EXPECT_EQ(soft, hard);
}

TEST(ServerProcess, SocketAndDirectoryArePrivate) {
  ServerProcess server;
  struct stat st {};
  ASSERT_EQ(::stat(server.socket().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string dir = std::filesystem::path(server.socket()).parent_path();
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  // Other uids allowed: the socket opens up, the directory can be entered but not listed.
  ServerProcess shared({"--backend", "memfd", "--model", test::tiny_model_dir().string() + ":tiny",
                        "--allow-uid", "4242"});
  ASSERT_EQ(::stat(shared.socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u);
  ASSERT_EQ(::stat(std::filesystem::path(shared.socket()).parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0711u);
  EXPECT_EQ(shared.stats()["models"].size(), 1u);  // the server's own uid still gets in
}

// An admin uid other than the server's is let in like an --allow-uid: without that, the 0700
// directory and 0600 socket would lock out the very uid that administers the server.
TEST(ServerProcess, AnAdminUidOfItsOwnCanReachTheSocket) {
  ServerProcess server({"--backend", "memfd", "--admin-uid", "4243"});
  struct stat st {};
  ASSERT_EQ(::stat(server.socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u);
  ASSERT_EQ(::stat(std::filesystem::path(server.socket()).parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0711u);
  EXPECT_NE(server.log().find("admin uid 4243 is not the server's: the socket is opened to it"),
            std::string::npos)
      << server.log();
  EXPECT_EQ(server.stats()["models"].size(), 0u);  // the server's own uid still gets in
}

// A socket directory that exists already is never loosened; if it keeps the allowed uids out,
// the server says so.
TEST(ServerProcess, WarnsWhenAnExistingDirectoryKeepsAllowedUidsOut) {
  test::TempDir tmp;
  const std::string dir = tmp / "private";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ChildProcess server = ChildProcess::spawn(
      ChildProcess::Options({test::binary("hearth-server"), "--socket", dir + "/sock", "--backend",
                             "memfd", "--allow-uid", "4242"})
          .stderr_to(ChildProcess::Stream::file(tmp / "server.log")));
  ASSERT_TRUE(test::eventually([&] {
    return test::read_file(tmp / "server.log").find("ready:") != std::string::npos;
  })) << test::read_file(tmp / "server.log");
  EXPECT_NE(test::read_file(tmp / "server.log")
                .find("warning: socket directory " + dir +
                      " has mode 0700: the other allowed uids cannot reach the socket"),
            std::string::npos)
      << test::read_file(tmp / "server.log");
}

// Clients check who serves at the socket (SO_PEERCRED) before they say hello.
TEST(ServerProcess, ClientsRefuseAServerOfAnotherUidThanNamed) {
  ServerProcess server;
  test::TempDir tmp;
  const std::string self = std::to_string(::geteuid()), other = std::to_string(::geteuid() + 1);
  const std::string refusal = "runs as uid " + self + ", not as the expected uid " + other;
  const WorkerRun worker = test::run_worker(tmp, {"--server", server.socket(), "--server-uid",
                                                  other, "--model", "tiny", "--prompt", "hi"});
  EXPECT_TRUE(worker.status.exited_with(1)) << worker.status.describe();
  EXPECT_NE(worker.err.find(refusal), std::string::npos) << worker.err;
  WorkerRun ctl = test::run_binary("hearth-ctl", tmp,
                                   {"--socket", server.socket(), "--server-uid", other, "list"});
  EXPECT_TRUE(ctl.status.exited_with(1)) << ctl.status.describe();
  EXPECT_NE(ctl.err.find(refusal), std::string::npos) << ctl.err;
  ctl = test::run_binary("hearth-ctl", tmp,
                         {"--socket", server.socket(), "--server-uid", self, "list"});
  EXPECT_TRUE(ctl.status.success()) << ctl.err;
}

// Limits that would make a server nobody can use (0), wrap (negative counts) or switch a
// timeout off (-1) are refused before anything starts, naming the flag.
TEST(ServerProcess, FlagsOutOfRangeAreRefused) {
  test::TempDir tmp;
  const std::vector<std::vector<std::string>> bad = {
      {"--max-clients", "0"},     {"--max-clients", "-5"},       {"--max-clients-per-uid", "0"},
      {"--idle-timeout-ms", "0"}, {"--idle-timeout-ms", "-1"},   {"--quiet-timeout-ms", "-1"},
      {"--device", "-1"},         {"--admin-uid", "4294967295"}, {"--allow-uid", "4294967295"},
  };
  for (const auto& flag : bad) {
    const std::string log = tmp / "server.log";
    std::vector<std::string> argv = {test::binary("hearth-server"), "--socket",
                                     tmp / "run/hearth.sock", "--backend", "memfd"};
    argv.insert(argv.end(), flag.begin(), flag.end());
    ChildProcess server =
        ChildProcess::spawn(ChildProcess::Options(argv).stderr_to(ChildProcess::Stream::file(log)));
    const auto status = server.wait_until(std::chrono::steady_clock::now() + test::kPatience);
    ASSERT_TRUE(status) << flag[0] << " " << flag[1] << " was accepted: the server started";
    EXPECT_FALSE(status->success()) << flag[0] << " " << flag[1];
    EXPECT_NE(test::read_file(log).find(flag[0]), std::string::npos) << test::read_file(log);
  }
}

TEST(ServerProcess, StartupErrorsAreClear) {
  test::TempDir tmp;
  auto start = [&](const std::vector<std::string>& args) {
    ServerProcess server(args, /*wait=*/false);
    const ExitStatus status = server.process().wait();
    return std::pair(status, server.log());
  };
  auto [s1, log1] = start({"--backend", "memfd", "--model", tmp.path().string() + "/nowhere"});
  EXPECT_TRUE(s1.exited_with(1)) << s1.describe();
  EXPECT_NE(
      log1.find("hearth-server: error: " + tmp.path().string() + "/nowhere: not a model directory"),
      std::string::npos)
      << log1;
  auto [s2, log2] =
      start({"--backend", "memfd", "--model", test::tiny_model_dir().string() + ":bad name"});
  EXPECT_NE(log2.find("is not a valid model name"), std::string::npos) << log2;
  auto [s3, log3] = start({"--backend", "memfd", "--model", test::tiny_model_dir().string(),
                           "--model", test::tiny_model_dir().string()});
  EXPECT_NE(log3.find("both named 'hearth-tiny-fortunes'"), std::string::npos) << log3;

  // A live server's socket is never taken over.
  ServerProcess live;
  ChildProcess second = ChildProcess::spawn(
      ChildProcess::Options({test::binary("hearth-server"), "--socket", live.socket(), "--backend",
                             "memfd", "--model", test::tiny_model_dir().string()})
          .stderr_to(ChildProcess::Stream::file(tmp / "second.log")));
  EXPECT_TRUE(second.wait().exited_with(1));
  const std::string second_log = test::read_file(tmp / "second.log");
  EXPECT_NE(second_log.find("already running at " + live.socket()), std::string::npos)
      << second_log;
  EXPECT_EQ(live.stats()["models"].size(), 1u);
}

// The socket is checked before any model is read: with both a socket directory others may
// enter and a model directory that does not exist, the error is about the socket.
TEST(ServerProcess, SocketMistakesFailBeforeAnyModelIsRead) {
  test::TempDir tmp;
  const std::string open_dir = tmp.path().string() + "/open";
  ASSERT_EQ(::mkdir(open_dir.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0755), 0);
  ChildProcess server =
      ChildProcess::spawn(ChildProcess::Options({test::binary("hearth-server"), "--socket",
                                                 open_dir + "/sock", "--backend", "memfd",
                                                 "--model", tmp.path().string() + "/no-such-model"})
                              .stderr_to(ChildProcess::Stream::file(tmp / "server.log")));
  EXPECT_TRUE(server.wait().exited_with(1));
  const std::string log = test::read_file(tmp / "server.log");
  EXPECT_NE(log.find("socket directory " + open_dir + " has mode 0755"), std::string::npos) << log;
  EXPECT_EQ(log.find("no-such-model"), std::string::npos) << log;
}

TEST(ServerProcess, StaleSocketOfAKilledServerIsReplaced) {
  auto first = std::make_unique<ServerProcess>();
  const std::string socket = first->socket();
  first->process().signal(SIGKILL);
  first->process().wait();
  struct stat st {};
  ASSERT_EQ(::stat(socket.c_str(), &st), 0) << "a killed server leaves its socket file";
  ChildProcess restarted = ChildProcess::spawn(
      ChildProcess::Options({test::binary("hearth-server"), "--socket", socket, "--backend",
                             "memfd", "--model", test::tiny_model_dir().string() + ":tiny"})
          .stderr_to(ChildProcess::Stream::file(socket + ".restart.log")));
  EXPECT_TRUE(test::eventually([&] {
    try {
      return test::connect_client(socket).call(ipc::op::kList).body["models"].size() == 1;
    } catch (const ipc::IpcError&) {
      return false;
    }
  })) << test::read_file(socket + ".restart.log");
}

}  // namespace
}  // namespace hearth
