#include "gateway/worker_pool.h"

#include <algorithm>
#include <csignal>
#include <fstream>

#include "gateway/api_error.h"
#include "ipc/child_ready.h"
#include "ipc/errors.h"

namespace hearth::gateway {

namespace {

using Clock = std::chrono::steady_clock;

// File-name-safe spelling of a model or profile name (they are already restricted, but a log
// name must never contain '/').
std::string file_safe(const std::string& s) {
  std::string out;
  for (char c : s)
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') ? c : '_';
  return out.empty() ? "default" : out;
}

// The last line a worker wrote to its log: why it exited, said in the error itself (the log
// lives in the runtime directory, which goes when the gateway does).
std::string last_log_line(const std::filesystem::path& log) {
  std::ifstream in(log, std::ios::binary);
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size <= 0) return "";
  const std::streamoff from = std::max<std::streamoff>(0, size - 4096);
  in.seekg(from);
  std::string tail(size_t(size - from), '\0');
  in.read(tail.data(), std::streamsize(tail.size()));
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
  const size_t nl = tail.rfind('\n');
  return nl == std::string::npos ? tail : tail.substr(nl + 1);
}

// A degree from a by-name map; absent is 1 (no tensor parallelism).
int degree_of(const std::map<std::string, int>& degrees, const std::string& name) {
  const auto it = degrees.find(name);
  return it == degrees.end() ? 1 : it->second;
}

}  // namespace

WorkerPool::WorkerPool(WorkerPoolOptions options) : options_(std::move(options)) {}

void WorkerPool::check_tensor_parallel(const std::string& model, const std::string& profile) const {
  if (profile.empty()) return;  // the default profile takes the model's degree
  const int want = degree_of(options_.model_tensor_parallel, model);
  const int has = degree_of(options_.profile_tensor_parallel, profile);
  // An unsharded model lets a profile cut its own pieces (the CPU engine's in-process ranks).
  if (want == 1 || want == has) return;
  // A client error, not a worker crash: the worker would refuse the degree at startup.
  throw ApiError(400, "invalid_request_error",
                 "the engine profile '" + profile + "' has tensor_parallel " + std::to_string(has) +
                     ", but the weight server shards " + model + " for " + "tensor parallel " +
                     std::to_string(want) + ": use a profile with tensor_parallel " +
                     std::to_string(want),
                 "model")
      .with_code("tensor_parallel_mismatch");
}

WorkerPool::~WorkerPool() {
  std::lock_guard lock(mutex_);
  // The workers first: each ends its requests in flight with a "shutting down" event that still
  // reaches their sessions, then exits.
  for (auto& [key, slot] : slots_)
    if (slot->process) slot->process->signal(SIGTERM);
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  for (auto& [key, slot] : slots_)
    if (slot->process && !slot->process->wait_until(deadline)) slot->process->kill_group();
  // Then every reader joined, whoever else still holds its connection.
  for (auto& [key, slot] : slots_)
    if (slot->connection) {
      slot->connection->close();
      slot->connection.reset();
    }
}

std::vector<std::string> WorkerPool::profile_names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : options_.profiles) out.push_back(name);
  return out;
}

int WorkerPool::context_length(const std::string& profile, int model_context) const {
  const auto it = options_.profile_context_lengths.find(profile);
  if (it == options_.profile_context_lengths.end() || it->second <= 0) return model_context;
  return model_context > 0 ? std::min(model_context, it->second) : it->second;
}

std::shared_ptr<WorkerConnection> WorkerPool::get(const std::string& model,
                                                  const std::string& profile) {
  if (!profile.empty() && !options_.profiles.count(profile))
    throw ApiError(
        404, "invalid_request_error",
        "the engine profile '" + profile + "' is not configured (--profile " + profile + "=FILE)",
        "model")
        .with_code("model_not_found");
  check_tensor_parallel(model, profile);
  Slot* slot;
  {
    std::lock_guard lock(mutex_);
    std::unique_ptr<Slot>& s = slots_[{model, profile}];
    if (!s) s = std::make_unique<Slot>();
    slot = s.get();
  }
  std::lock_guard start_lock(slot->mutex);
  if (slot->connection && slot->connection->alive()) return slot->connection;
  return start(model, profile, *slot);
}

std::shared_ptr<WorkerConnection> WorkerPool::start(const std::string& model,
                                                    const std::string& profile, Slot& slot) {
  auto log = [&](const std::string& line) {
    if (options_.log) options_.log(line);
  };
  // Whatever ran before is finished with: its reader joined (sessions may still hold the
  // connection, so its destructor may never run here), its process reaped (it exited idle, or
  // crashed).
  if (slot.connection) {
    slot.connection->close();
    slot.connection.reset();
  }
  if (slot.process) {
    if (auto status = slot.process->wait_until(Clock::now() + std::chrono::seconds(2)))
      log("worker " + model + ":" + profile + " " + status->describe());
    else
      slot.process->kill_group();
    slot.process.reset();
  }
  const int generation = ++slot.generation;
  const std::string base =
      "worker-" + file_safe(model) + "-" + file_safe(profile) + "-" + std::to_string(generation);
  slot.socket = options_.runtime_dir / (base + ".sock");
  std::vector<std::string> argv = {options_.worker_binary.string(),
                                   "--serve",
                                   slot.socket.string(),
                                   "--server",
                                   options_.server_socket,
                                   "--model",
                                   model,
                                   "--idle-exit",
                                   std::to_string(options_.idle_exit.count())};
  if (!profile.empty()) {
    argv.push_back("--profile");
    argv.push_back(options_.profiles.at(profile).string());
  } else if (const int n = degree_of(options_.model_tensor_parallel, model); n > 1) {
    argv.push_back("--set");
    argv.push_back("tensor_parallel=" + std::to_string(n));
  }
  argv.insert(argv.end(), options_.extra_worker_args.begin(), options_.extra_worker_args.end());
  const auto spawn = ChildProcess::Options(argv).stderr_to(
      ChildProcess::Stream::file(options_.runtime_dir / (base + ".log")));
  const auto started = Clock::now();
  try {
    slot.process = std::make_unique<ChildProcess>(ChildProcess::spawn(spawn));
  } catch (const std::exception& e) {
    // The binary is missing or not executable: nothing a retry mends.
    throw ApiError(500, "server_error", std::string("cannot start a worker: ") + e.what());
  }
  {
    std::lock_guard lock(mutex_);
    ++starts_;
    if (generation > 1) ++restarts_;
  }
  // Ready once it accepts connections; a worker that exits first failed to start.
  const ReadyWait ready = wait_until_ready(
      *slot.process, started + options_.start_timeout, std::chrono::milliseconds(10), [&] {
        try {
          slot.connection = WorkerConnection::connect(slot.socket.string());
          return true;
        } catch (const ipc::ServerNotRunning&) {
          return false;
        }
      });
  if (ready.outcome == ReadyWait::Outcome::kExited) {
    // Permanent as far as a client can tell (profiles are checked at startup, so this is a
    // model or backend the worker cannot run): a 500 without Retry-After, so that clients do
    // not retry it forever. Its reason goes in the message and the gateway's own log.
    const std::string why = last_log_line(options_.runtime_dir / (base + ".log"));
    const std::string what = "the worker for " + model + (profile.empty() ? "" : ":" + profile) +
                             " failed to start (" + ready.status.describe() + ")" +
                             (why.empty() ? "" : ": " + why);
    log(what);
    throw ApiError(500, "server_error", what);
  }
  if (ready.outcome == ReadyWait::Outcome::kTimedOut) {
    slot.process->kill_group();
    throw ApiError(503, "server_error", "the worker for " + model + " did not start in time", "",
                   5);
  }
  log("worker " + model + (profile.empty() ? "" : ":" + profile) + " started (pid " +
      std::to_string(slot.process->pid()) + ", " +
      std::to_string(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count()) +
      " ms)");
  return slot.connection;
}

std::vector<LiveWorker> WorkerPool::connections() {
  std::vector<LiveWorker> out;
  std::lock_guard lock(mutex_);
  for (auto& [key, slot] : slots_) {
    std::unique_lock slot_lock(slot->mutex, std::try_to_lock);
    if (slot_lock && slot->connection && slot->connection->alive())
      out.push_back({key.first, key.second, slot->generation, slot->connection});
  }
  return out;
}

WorkerPoolStats WorkerPool::stats() {
  WorkerPoolStats s;
  std::lock_guard lock(mutex_);
  s.starts = starts_;
  s.restarts = restarts_;
  for (auto& [key, slot] : slots_) {
    std::unique_lock slot_lock(slot->mutex, std::try_to_lock);  // one starting is not alive yet
    if (slot_lock && slot->connection && slot->connection->alive()) ++s.alive;
  }
  return s;
}

}  // namespace hearth::gateway
