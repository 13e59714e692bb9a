#include "gateway/server_supervisor.h"

#include <csignal>
#include <fstream>
#include <sstream>

#include "ipc/child_ready.h"
#include "ipc/client.h"
#include "ipc/errors.h"

namespace hearth::gateway {

namespace {

using Clock = std::chrono::steady_clock;

std::string log_tail(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line, tail;
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  for (size_t i = lines.size() > 5 ? lines.size() - 5 : 0; i < lines.size(); ++i)
    tail += "\n  " + lines[i];
  return tail;
}

// A restart abandoned because the supervisor is stopping.
struct Stopping {};

// How long one readiness probe waits for the server's hello: short, so that a stop is seen
// between probes while a server loads; a server still loading is probed again.
constexpr auto kProbeTimeout = std::chrono::seconds(1);

}  // namespace

ServerSupervisor::ServerSupervisor(SupervisorOptions options) : options_(std::move(options)) {
  socket_ = (options_.runtime_dir / "server.sock").string();
  start();
  watcher_ = std::thread([this] { watch(); });
}

ServerSupervisor::~ServerSupervisor() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  if (process_) {
    process_->signal(SIGTERM);
    if (!process_->wait_until(Clock::now() + std::chrono::seconds(10))) process_->kill_group();
  }
}

void ServerSupervisor::start() {
  const std::filesystem::path log = options_.runtime_dir / "server.log";
  std::vector<std::string> argv = {options_.server_binary.string(),
                                   "--socket",
                                   socket_,
                                   "--backend",
                                   options_.backend,
                                   "--quantize",
                                   options_.quantize,
                                   "--tensor-parallel",
                                   std::to_string(options_.tensor_parallel),
                                   "--quiet"};
  for (const std::string& m : options_.models) {
    argv.push_back("--model");
    argv.push_back(m);
  }
  const auto spawn = ChildProcess::Options(argv).stderr_to(ChildProcess::Stream::file(log));
  process_ = std::make_unique<ChildProcess>(ChildProcess::spawn(spawn));
  // The server binds before it loads, and answers hello once every model is in: a hello is the
  // readiness check, tried again (with a short timeout each) until start_timeout, so that a
  // supervisor stopping meanwhile gives up at the next try instead of at the end.
  ReadyWait ready;
  try {
    ready = wait_until_ready(
        *process_, Clock::now() + options_.start_timeout, std::chrono::milliseconds(20), [&] {
          if (stopping_) throw Stopping{};
          try {
            ipc::ClientOptions client;
            client.name = "hearth-gateway";
            client.timeout = kProbeTimeout;
            ipc::Client::connect(socket_, client);
            return true;
          } catch (const ipc::ServerNotRunning&) {
            return false;
          } catch (const ipc::TimeoutError&) {
            return false;  // still loading
          } catch (const ipc::IpcError& e) {
            if (!process_->running()) return false;  // it died meanwhile: reported as its exit
            throw std::runtime_error(std::string("hearth-server does not answer: ") + e.what());
          }
        });
  } catch (const Stopping&) {
    // Not serving anything yet: nothing to shut down gracefully.
    process_->kill_group();
    process_->wait();
    throw;
  }
  if (ready.outcome == ReadyWait::Outcome::kExited)
    throw std::runtime_error("hearth-server " + ready.status.describe() + ":" + log_tail(log));
  if (ready.outcome == ReadyWait::Outcome::kTimedOut)
    throw std::runtime_error("hearth-server did not start in time");
  if (options_.log)
    options_.log("weight server ready (pid " + std::to_string(process_->pid()) + ")");
}

void ServerSupervisor::watch() {
  std::unique_lock lock(mutex_);
  auto backoff = std::chrono::seconds(1);
  while (!stopping_) {
    stop_cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stopping_.load(); });
    if (stopping_) break;
    auto status = process_->wait_until(Clock::now());
    if (!status) continue;
    if (options_.log) options_.log("weight server " + status->describe() + "; restarting it");
    stop_cv_.wait_for(lock, backoff, [&] { return stopping_.load(); });
    if (stopping_) break;
    // The restart (up to start_timeout while a large model loads) runs without the lock: it
    // once held it throughout, and the destructor waited for it to set stopping_.
    lock.unlock();
    try {
      start();
      backoff = std::chrono::seconds(1);
    } catch (const Stopping&) {
    } catch (const std::exception& e) {
      if (options_.log)
        options_.log(std::string("restarting the weight server failed: ") + e.what());
      backoff = std::min(backoff * 2, std::chrono::seconds(60));
    }
    lock.lock();
  }
}

}  // namespace hearth::gateway
