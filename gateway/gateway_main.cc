// hearth-gateway: an OpenAI-compatible HTTP server in front of a weight server and a pool of
// batching workers, one per (model, engine profile), all on one copy of the weights.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "gateway/http_gateway.h"
#include "gateway/metrics.h"
#include "gateway/model_catalog.h"
#include "gateway/runtime_dir.h"
#include "gateway/server_supervisor.h"
#include "gateway/worker_pool.h"
#include "ipc/main_guard.h"
#include "base/read_file.h"
#include "worker/engine/profile.h"

namespace fs = std::filesystem;

namespace {

std::mutex g_log_mutex;
void log_line(const std::string& line) {
  std::lock_guard lock(g_log_mutex);
  std::fprintf(stderr, "hearth-gateway: %s\n", line.c_str());
  std::fflush(stderr);
}

// The directory this executable lives in: its sibling binaries are the defaults.
fs::path own_dir() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::current_path() : self.parent_path();
}

std::string read_api_key(const std::string& path) {
  std::string key = hearth::read_file(path, 4096);
  while (!key.empty() && (key.back() == '\n' || key.back() == '\r' || key.back() == ' '))
    key.pop_back();
  if (key.empty()) throw std::runtime_error(path + ": the API key file is empty");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077))
    log_line("warning: " + path + " is readable by other users");
  return key;
}

int run(int argc, char** argv) {
  CLI::App app{
      "hearth-gateway: OpenAI-compatible HTTP API over hearth's shared weights and batching "
      "workers"};
  app.set_version_flag("--version", "hearth-gateway 0.1.0");
  std::vector<std::string> models, profiles, worker_args;
  std::string server_socket, api_key_file, chat_template_file, backend = "auto", quantize = "none";
  hearth::gateway::HttpOptions http;
  int idle_exit_s = 300, request_timeout_s = 600, max_body_mb = 16, tensor_parallel = 1;
  std::string runtime_under =
      std::getenv("XDG_RUNTIME_DIR") ? std::getenv("XDG_RUNTIME_DIR") : "/tmp";
  std::string worker_binary = (own_dir() / "hearth-worker").string();
  std::string server_binary = (own_dir() / "hearth-server").string();
  app.add_option("--model", models,
                 "model directory to serve, DIR or DIR:NAME (repeatable); the gateway starts its "
                 "own weight server for them")
      ->type_name("DIR[:NAME]");
  auto* server_opt = app.add_option("--server", server_socket,
                                    "use a running hearth-server's socket instead of --model");
  app.add_option("--profile", profiles,
                 "engine profile NAME=FILE.json (repeatable); requests pick one as "
                 "\"model\": \"MODEL:NAME\"")
      ->type_name("NAME=FILE");
  app.add_option("--host", http.host, "address to listen on (default 127.0.0.1: this machine)");
  app.add_option("--port", http.port, "port (0 picks a free one)")->check(CLI::Range(0, 65535));
  app.add_option("--api-key-file", api_key_file,
                 "require 'Authorization: Bearer KEY' with the key in this file");
  app.add_option("--chat-template", chat_template_file,
                 "Jinja chat template file used for every model instead of its own");
  app.add_option("--backend", backend, "own server's weights: auto, vmm, memfd")
      ->check(CLI::IsMember({"auto", "vmm", "memfd"}));
  app.add_option("--quantize", quantize,
                 "own server's weights: none, or fp8 (16-bit projections stored in fp8 at load, "
                 "as hearth-server --quantize fp8)")
      ->check(CLI::IsMember({"none", "fp8"}));
  app.add_option("--tensor-parallel", tensor_parallel,
                 "own server's weights: shard every model for N ranks (as hearth-server "
                 "--tensor-parallel N); profiles must then set tensor_parallel N, the default "
                 "profile takes it")
      ->check(CLI::Range(1, 64));
  app.add_option("--max-in-flight", http.max_in_flight,
                 "requests admitted at once; more get 429 with Retry-After")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-connections", http.max_connections, "HTTP handler threads")
      ->check(CLI::Range(1, 4096));
  app.add_option("--max-body-mb", max_body_mb, "largest request body (MiB)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--request-timeout-s", request_timeout_s, "longest a request may run")
      ->check(CLI::Range(1, 86400));
  app.add_option("--worker-idle-s", idle_exit_s, "an idle worker exits after this long")
      ->check(CLI::Range(1, 86400));
  app.add_option("--worker-arg", worker_args, "extra argument for every worker (repeatable)");
  app.add_option("--worker-binary", worker_binary, "hearth-worker to run");
  app.add_option("--server-binary", server_binary, "hearth-server to run");
  app.add_option("--runtime-dir", runtime_under, "where the private socket directory goes");
  CLI11_PARSE(app, argc, argv);

  if (models.empty() == !*server_opt)
    throw std::runtime_error("give --model DIR (one or more) or --server SOCKET, not both");
  if (*server_opt && tensor_parallel != 1)
    throw std::runtime_error(
        "--tensor-parallel shards the gateway's own server (--model); a --server shards its own");
  // Every engine profile read as its workers will read it, before anything starts: a bad key
  // is an exit here naming the profile and the key, not a failure at the first request.
  std::map<std::string, fs::path> profile_files;
  std::map<std::string, int> profile_contexts;
  std::map<std::string, int> profile_degrees;
  for (const std::string& p : profiles) {
    const size_t eq = p.find('=');
    if (eq == 0 || eq == std::string::npos || eq + 1 == p.size())
      throw std::runtime_error("--profile expects NAME=FILE, got '" + p + "'");
    const std::string name = p.substr(0, eq);
    if (name.find_first_of(":/ ") != std::string::npos)
      throw std::runtime_error("--profile name '" + name + "' may not contain ':', '/' or ' '");
    const fs::path file = fs::absolute(p.substr(eq + 1));
    const hearth::Profile profile = hearth::parse_engine_profile(
        hearth::read_file(file), "--profile " + name + " (" + file.string() + ")");
    profile_files[name] = file;
    profile_contexts[name] = profile.engine.context_length;
    profile_degrees[name] = profile.engine.tensor_parallel;
  }
  http.request_timeout = std::chrono::seconds(request_timeout_s);
  http.max_body_bytes = size_t(max_body_mb) << 20;
  if (!api_key_file.empty()) http.api_key = read_api_key(api_key_file);
  if (http.host != "127.0.0.1" && http.host != "localhost" && http.host != "::1" && !http.api_key)
    log_line("warning: listening on " + http.host + " without --api-key-file");

  // SIGINT/SIGTERM end the process through one thread that waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  hearth::gateway::RuntimeDir runtime(runtime_under);
  std::optional<hearth::gateway::ServerSupervisor> own_server;
  if (!models.empty()) {
    hearth::gateway::SupervisorOptions s;
    s.server_binary = server_binary;
    s.runtime_dir = runtime.path();
    s.models = models;
    s.backend = backend;
    s.quantize = quantize;
    s.tensor_parallel = tensor_parallel;
    s.log = log_line;
    log_line("starting a weight server for " + std::to_string(models.size()) + " model(s)");
    own_server.emplace(std::move(s));
    server_socket = own_server->socket();
  }
  std::optional<std::string> chat_template;
  if (!chat_template_file.empty()) chat_template = hearth::read_file(chat_template_file);
  const auto catalog = hearth::gateway::ModelCatalog::load(server_socket, log_line, chat_template);

  hearth::gateway::WorkerPoolOptions w;
  w.worker_binary = worker_binary;
  w.server_socket = server_socket;
  w.runtime_dir = runtime.path();
  w.idle_exit = std::chrono::seconds(idle_exit_s);
  w.extra_worker_args = worker_args;
  w.log = log_line;
  w.profiles = std::move(profile_files);
  w.profile_context_lengths = std::move(profile_contexts);
  w.profile_tensor_parallel = std::move(profile_degrees);
  for (const std::string& n : catalog.names())
    w.model_tensor_parallel[n] = catalog.find(n)->tensor_parallel;
  // Metrics before the pool: a session's last events (say, of a stream its client dropped) can
  // still come in while the pool stops its workers, and record into them.
  hearth::gateway::Metrics metrics;
  hearth::gateway::WorkerPool pool(std::move(w));
  hearth::gateway::HttpGateway gateway(http, catalog, pool, metrics);
  gateway.bind();

  std::thread signal_waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    log_line(std::string("stopping (") + (sig == SIGINT ? "SIGINT" : "SIGTERM") + ")");
    gateway.stop();
  });
  // Woken (if stop() came from elsewhere) and joined on every way out of here, run() throwing
  // included: a std::thread destroyed unjoined would abort the process instead of it exiting
  // with the error.
  struct JoinSignalWaiter {
    std::thread& waiter;
    ~JoinSignalWaiter() {
      pthread_kill(waiter.native_handle(), SIGTERM);
      waiter.join();
    }
  } join_signal_waiter{signal_waiter};
  std::string names;
  for (const std::string& n : catalog.names()) names += (names.empty() ? "" : ", ") + n;
  log_line("ready: http://" + http.host + ":" + std::to_string(gateway.port()) + " serving " +
           names);
  std::fprintf(stdout, "listening on http://%s:%d\n", http.host.c_str(), gateway.port());
  std::fflush(stdout);
  gateway.run();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return hearth::run_main("hearth-gateway", [&] { return run(argc, argv); });
}
