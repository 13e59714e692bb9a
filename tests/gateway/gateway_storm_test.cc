// A storm on one gateway: 64 clients at once, each mixing well-formed streams with what a hostile
// or broken client sends (hang-ups mid-stream, invalid UTF-8, oversized fields, chunked bodies
// past the limit, pipelined requests, bytes that are not HTTP). What must hold: every well-formed
// stream ends with [DONE] and exactly the tokens it gets alone, every bad request gets a 4xx, no
// worker restarts, the gateway still answers; and when the gateway is killed, no process it
// started outlives it.

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "tests/gateway/gateway_process.h"
#include "tests/gateway/raw_http_client.h"

namespace hearth::test {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kClients = 64;
constexpr int kRoundsPerClient = 6;
constexpr int kPrompts = 8;

std::string http_post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// The same body in chunks of `chunk` bytes (Transfer-Encoding: chunked).
std::string http_post_chunked(const std::string& path, const std::string& body, size_t chunk) {
  std::string out = "POST " + path +
                    " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n";
  char size[32];
  for (size_t off = 0; off < body.size(); off += chunk) {
    const size_t n = std::min(chunk, body.size() - off);
    std::snprintf(size, sizeof size, "%zx\r\n", n);
    out += size;
    out.append(body, off, n);
    out += "\r\n";
  }
  return out + "0\r\n\r\n";
}

json stream_body(int prompt, int seed) {
  return {{"model", "fortunes"}, {"prompt", "Storm " + std::to_string(prompt)},
          {"max_tokens", 16},    {"temperature", prompt % 2 ? 0.7 : 0.0},
          {"seed", seed},        {"ignore_eos", true},
          {"stream", true}};
}

// The text of choice 0 of an SSE body, and whether it ended with a finish reason and [DONE].
struct Streamed {
  std::string text;
  bool finished = false;
  bool done = false;
};
Streamed parse_stream(const std::string& body) {
  Streamed s;
  for (const json& e : sse_events(body)) {
    if (e == "[DONE]") {
      s.done = true;
      continue;
    }
    if (!e.contains("choices")) continue;
    for (const json& c : e["choices"]) {
      s.text += c.value("text", "");
      if (!c["finish_reason"].is_null()) s.finished = true;
    }
  }
  return s;
}

// Every process below `root` (children, grandchildren...), from /proc.
std::set<pid_t> descendants(pid_t root) {
  std::map<pid_t, std::vector<pid_t>> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid;
    if (rest >> state >> ppid) children[ppid].push_back(pid_t(std::stoi(name)));
  }
  std::set<pid_t> out;
  std::vector<pid_t> todo{root};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    for (pid_t c : children[p])
      if (out.insert(c).second) todo.push_back(c);
  }
  return out;
}

// Waits for each process to exit (a pidfd turns readable when it does); the ones still alive at
// the deadline.
std::set<pid_t> survivors(const std::set<pid_t>& pids, Clock::time_point deadline) {
  std::set<pid_t> left;
  for (pid_t pid : pids) {
    UniqueFd fd(int(::syscall(SYS_pidfd_open, pid, 0)));
    if (!fd) continue;  // already gone
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, int(std::max<int64_t>(ms.count(), 0))) != 1) left.insert(pid);
  }
  return left;
}

// What each kind of round saw, counted across all clients.
struct Tally {
  std::atomic<int> streams{0}, streams_ok{0}, hangups{0}, bad_requests{0}, refused_4xx{0},
      pipelined{0}, pipelined_ok{0};
  std::mutex mutex;
  std::vector<std::string> failures;
  void fail(std::string why) {
    std::lock_guard lock(mutex);
    if (failures.size() < 20) failures.push_back(std::move(why));
  }
};

TEST(GatewayStorm, SixtyFourHostileAndHonestClientsLeaveEveryHonestStreamIntact) {
  const auto runtime =
      std::filesystem::temp_directory_path() / ("hearth-storm-" + std::to_string(::getpid()));
  std::filesystem::remove_all(runtime);
  std::filesystem::create_directories(runtime);
  std::filesystem::permissions(runtime, std::filesystem::perms::owner_all);
  auto gw = std::make_unique<GatewayProcess>(
      std::vector<std::string>{"--max-body-mb", "4", "--max-in-flight", "512", "--max-connections",
                               "96", "--runtime-dir", runtime.string()});
  const int port = gw->port();
  auto deadline = [] { return Clock::now() + std::chrono::seconds(120); };

  // Each honest request alone first: the storm must not change a byte of it.
  std::map<std::pair<int, int>, std::string> alone;
  for (int p = 0; p < kPrompts; ++p)
    for (int seed = 0; seed < 2; ++seed) {
      RawClient c(port);
      ASSERT_TRUE(c.send(http_post("/v1/completions", stream_body(p, seed).dump())));
      auto r = c.response();
      ASSERT_TRUE(r) << "no response alone";
      ASSERT_EQ(r->status, 200) << r->body;
      const Streamed s = parse_stream(r->body);
      ASSERT_TRUE(s.done && s.finished);
      alone[{p, seed}] = s.text;
    }

  Tally t;
  auto client = [&](int index) {
    std::mt19937 rng(uint32_t(1000 + index));
    for (int round = 0; round < kRoundsPerClient; ++round) {
      const int kind = int(rng() % 7);
      const int p = int(rng() % kPrompts), seed = int(rng() % 2);
      try {
        RawClient c(port);
        switch (kind) {
          case 0:
          case 1: {  // an honest stream, read to the end
            ++t.streams;
            c.send(http_post("/v1/completions", stream_body(p, seed).dump()));
            auto r = c.response();
            if (!r || r->status != 200) {
              t.fail("honest stream: " +
                     (r ? std::to_string(r->status) + " " + r->body : std::string("no response")));
              break;
            }
            const Streamed s = parse_stream(r->body);
            if (s.done && s.finished && s.text == alone[{p, seed}])
              ++t.streams_ok;
            else
              t.fail("honest stream " + std::to_string(p) + "/" + std::to_string(seed) +
                     " differs: '" + s.text + "' vs '" + alone[{p, seed}] + "'");
            break;
          }
          case 2: {  // a stream the client walks away from after its first bytes
            ++t.hangups;
            json body = stream_body(p, seed);
            body["max_tokens"] = 200;
            c.send(http_post("/v1/completions", body.dump()));
            c.fill(deadline());
            break;  // the connection closes here
          }
          case 3: {  // invalid UTF-8 in a string field, through either endpoint
            ++t.bad_requests;
            const std::string body =
                rng() % 2 ? R"({"model":"fortunes","prompt":")" + std::string("\xff\xfe") + "\"}"
                          : R"({"model":"fortunes","messages":[{"role":"user","content":")" +
                                std::string("caf\xc3") + "\"}]}";
            c.send(http_post(rng() % 2 ? "/v1/completions" : "/v1/chat/completions", body));
            auto r = c.response();
            if (r && r->status >= 400 && r->status < 500)
              ++t.refused_4xx;
            else
              t.fail("invalid UTF-8: " + (r ? std::to_string(r->status) : std::string("none")));
            break;
          }
          case 4: {  // an oversized field inside a body the size limit lets through
            ++t.bad_requests;
            json body = stream_body(p, seed);
            body["cache_salt"] = std::string(2u << 20, 's');
            c.send(http_post("/v1/completions", body.dump()));
            auto r = c.response();
            if (r && r->status >= 400 && r->status < 500)
              ++t.refused_4xx;
            else
              t.fail("oversized field: " + (r ? std::to_string(r->status) : std::string("none")));
            break;
          }
          case 5: {  // a chunked body: a small honest one, or one past --max-body-mb
            ++t.bad_requests;
            const bool huge = rng() % 2;
            json body = stream_body(p, seed);
            body["stream"] = false;
            if (huge) body["user"] = std::string(6u << 20, 'x');
            c.send(http_post_chunked("/v1/completions", body.dump(), 64 << 10));
            auto r = c.response();
            const int want = huge ? 413 : 200;
            if (r && r->status == want)
              ++t.refused_4xx;
            else
              t.fail("chunked body (" + std::string(huge ? "huge" : "small") +
                     "): " + (r ? std::to_string(r->status) + " " + r->body : std::string("none")));
            break;
          }
          case 6: {  // three pipelined requests, then garbage that is not HTTP
            ++t.pipelined;
            std::string all;
            for (int i = 0; i < 3; ++i) all += "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
            c.send(all);
            int answered = 0;
            for (int i = 0; i < 3; ++i) {
              auto r = c.response();
              if (r && r->status == 200) ++answered;
            }
            c.send("\x16\x03\x01 not http\r\n\r\n");
            auto r = c.response();
            if (answered == 3 && (!r || r->status == 400))
              ++t.pipelined_ok;
            else
              t.fail("pipelined: " + std::to_string(answered) + " of 3 answered");
            break;
          }
        }
      } catch (const std::exception& e) {
        t.fail(std::string("client: ") + e.what());
      }
    }
  };
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) clients.emplace_back(client, i);
  for (std::thread& c : clients) c.join();

  std::printf(
      "storm: %d honest streams (%d intact), %d hang-ups, %d bad requests (%d refused as "
      "expected), %d pipelined connections (%d answered in full)\n",
      t.streams.load(), t.streams_ok.load(), t.hangups.load(), t.bad_requests.load(),
      t.refused_4xx.load(), t.pipelined.load(), t.pipelined_ok.load());
  for (const std::string& f : t.failures) ADD_FAILURE() << f;
  EXPECT_GT(t.streams.load(), 0);
  EXPECT_EQ(t.streams_ok.load(), t.streams.load());
  EXPECT_EQ(t.refused_4xx.load(), t.bad_requests.load());
  EXPECT_EQ(t.pipelined_ok.load(), t.pipelined.load());

  // The gateway still serves, and no worker had to be restarted: nothing the storm sent reached
  // a worker in a form that could take its other streams down.
  RawClient health(port);
  ASSERT_TRUE(health.send("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  auto metrics = health.response();
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  std::smatch m;
  const std::regex restarts(R"(\nhearth:worker_restarts(?:_total)?(?:\{[^}]*\})? (\S+))");
  ASSERT_TRUE(std::regex_search(metrics->body, m, restarts)) << metrics->body;
  EXPECT_EQ(std::stod(m[1]), 0) << metrics->body;

  // Kill the gateway outright: the weight server and workers it started go with it.
  const std::set<pid_t> children = descendants(gw->process().pid());
  EXPECT_GE(children.size(), 2u) << "expected a weight server and a worker";
  gw->process().signal(SIGKILL);
  gw->process().wait();
  const std::set<pid_t> left = survivors(children, Clock::now() + std::chrono::seconds(20));
  EXPECT_TRUE(left.empty()) << left.size() << " process(es) outlived the gateway";
  for (pid_t p : left) ::kill(p, SIGKILL);
  gw.reset();
  std::filesystem::remove_all(runtime);
}

}  // namespace
}  // namespace hearth::test
