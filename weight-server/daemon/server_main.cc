// hearth-server: loads models once (one allocation per tensor, on the GPU with the vmm backend
// or in sealed memfds) and shares them with hearth-worker processes over a Unix socket.
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "broker/broker.h"
#include "ipc/main_guard.h"
#include "weight-server/daemon/model_spec.h"
#include "weight-server/model/shard_plan.h"
#include "weight-server/daemon/server_handler.h"
#include "weight-server/daemon/tensor_parallel_devices.h"
#include "weight-server/sharing/vmm_backend.h"

namespace {

void log_line(std::string_view line) {
  std::fprintf(stderr, "hearth-server: %.*s\n", int(line.size()), line.data());
  std::fflush(stderr);
}

// Every served tensor holds a descriptor (its sealed memfd or its exported VMM handle) and a
// reply carries up to 250 more: a large model outgrows the usual soft limit of 1024.
void raise_descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// An existing socket directory may be stricter than 0711 (the server never loosens one it did
// not create); then the other allowed uids cannot reach the socket, which deserves a word.
void warn_if_others_cannot_enter(const std::string& socket) {
  std::string dir = std::filesystem::path(socket).parent_path().string();
  if (dir.empty()) dir = ".";
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0 && (st.st_mode & S_IXOTH) == 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    log_line("warning: socket directory " + dir + " has mode " + mode +
             ": the other allowed uids cannot reach the socket (chmod o+x " + dir + ")");
  }
}

std::string resolve_backend(const std::string& requested) {
  std::string why;
  const bool gpu = hearth::vmm_gpu_available(&why);
  if (requested == "auto") return gpu ? "vmm" : "memfd";
  if (requested == "vmm" && !gpu)
    throw std::runtime_error("--backend vmm needs a CUDA GPU: " + why + "; use --backend memfd");
  return requested;
}

constexpr size_t kMaxClients = 65536;

int run(int argc, char** argv) {
  // Every limit is range-checked: 0 would start a server nobody can use, a negative count would
  // wrap, and a negative timeout would disable it. (uid_t)-1 means "no uid" to the kernel.
  const CLI::Range kTimeoutMs(100, 24 * 3600 * 1000);
  const CLI::Range kUid(uid_t{0}, uid_t(-2));
  CLI::App app{
      "hearth-server: load models once and share their weights with hearth-worker processes"};
  app.set_version_flag("--version", "hearth-server 0.1.0");
  std::vector<std::string> model_args;
  std::string socket, backend = "auto";
  std::vector<uid_t> allow_uids;
  uid_t admin_uid = ::geteuid();
  int device = 0, threads = 4, tensor_parallel = 1;
  std::vector<int> devices;
  size_t max_clients = 256, max_clients_per_uid = 64;
  int idle_timeout_ms = 10'000, quiet_timeout_ms = 60'000;
  bool quiet = false;
  double memory_fraction = 0.9;
  uint64_t memory_mb = 0;
  app.add_option("--model", model_args,
                 "model directory to serve, as DIR or DIR:NAME (default name: the directory's "
                 "basename); repeatable")
      ->type_name("DIR[:NAME]");
  app.add_option("--socket", socket, "Unix socket to listen on; its directory is created 0700")
      ->required();
  app.add_option("--backend", backend,
                 "where the weights live: auto (vmm when a GPU is present), vmm, memfd")
      ->check(CLI::IsMember({"auto", "vmm", "memfd"}));
  app.add_option("--allow-uid", allow_uids,
                 "also let this uid connect (repeatable; widens the socket to 0666 and a new "
                 "directory to 0711; every peer's uid is still checked)")
      ->check(kUid);
  app.add_option("--admin-uid", admin_uid,
                 "uid allowed to load, unload and shut down (default: the server's)")
      ->check(kUid);
  app.add_option("--device", device, "CUDA device for the vmm backend")->check(CLI::Range(0, 1023));
  app.add_option("--tensor-parallel", tensor_parallel,
                 "split every model into this many ranks' shards, each tensor's piece its own "
                 "allocation, listed per rank in the manifest (vmm: rank r on its own GPU)")
      ->check(CLI::Range(1, hearth::kMaxTensorParallel));
  app.add_option("--devices", devices,
                 "vmm with --tensor-parallel N: the N distinct CUDA devices of ranks 0..N-1, "
                 "comma-separated (default 0,1,...,N-1); --gpu-memory-fraction applies to each")
      ->delimiter(',')
      ->check(CLI::Range(0, 1023));
  app.add_option("--threads", threads, "threads that copy and checksum weights")
      ->check(CLI::Range(1, 64));
  app.add_option("--max-clients", max_clients, "connections served at once")
      ->check(CLI::Range(size_t{1}, kMaxClients));
  app.add_option("--max-clients-per-uid", max_clients_per_uid,
                 "connections one uid may hold at once (the admin uid is not capped)")
      ->check(CLI::Range(size_t{1}, kMaxClients));
  app.add_option("--idle-timeout-ms", idle_timeout_ms,
                 "the time a client has to send its hello, each whole request and to read each "
                 "reply; a client that trickles bytes is dropped all the same")
      ->check(kTimeoutMs);
  app.add_option("--quiet-timeout-ms", quiet_timeout_ms,
                 "drop a connected client that holds no lease and sends nothing this long (a "
                 "worker holding a lease is never dropped for being quiet)")
      ->check(kTimeoutMs);
  app.add_option("--gpu-memory-fraction", memory_fraction,
                 "share of the device's memory that the weights and every worker's KV lease may "
                 "take together")
      ->check(CLI::Range(0.01, 1.0));
  app.add_option("--memory-mb", memory_mb,
                 "the device memory the budget divides, in MiB (default: the GPU's with the vmm "
                 "backend, the machine's RAM with memfd); with --tensor-parallel N, each rank's "
                 "device has a budget of its own of this size, its weights and KV leases")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  std::string quantize = "none";
  app.add_option("--quantize", quantize,
                 "none | fp8: store the decoder projections as e4m3 with per-channel F32 scales, "
                 "quantized once at load (the bytes hearth-synth --dtype fp8 writes); fp8 "
                 "checkpoints are served as they are")
      ->check(CLI::IsMember({"none", "fp8"}));
  app.add_flag("--quiet", quiet, "no progress lines");
  CLI11_PARSE(app, argc, argv);

  std::vector<hearth::ModelSpec> specs;
  std::set<std::string> names;
  for (const std::string& arg : model_args) {
    specs.push_back(hearth::parse_model_spec(arg));
    if (!names.insert(specs.back().name).second)
      throw std::runtime_error("two --model arguments are both named '" + specs.back().name +
                               "'; name one with DIR:NAME");
  }

  raise_descriptor_limit();
  hearth::ServeOptions serve;
  serve.backend = resolve_backend(backend);
  serve.device = device;
  serve.tensor_parallel = tensor_parallel;
  if (!devices.empty() && (serve.backend != "vmm" || tensor_parallel < 2))
    throw std::runtime_error("--devices is for the vmm backend with --tensor-parallel 2 or more");
  if (serve.backend == "vmm" && tensor_parallel > 1) {
    if (app.count("--device") > 0)
      throw std::runtime_error("--device names one GPU; with --tensor-parallel " +
                               std::to_string(tensor_parallel) +
                               " name one per rank with --devices");
    // Checked before binding or loading; the budget's own device is rank 0's.
    serve.devices = hearth::resolve_tensor_parallel_devices(devices, tensor_parallel,
                                                            hearth::vmm_device_count());
    serve.device = serve.devices[0];
  }
  serve.memory_fraction = memory_fraction;
  serve.device_memory_bytes = memory_mb << 20;
  serve.threads = threads;
  serve.quantize_fp8 = quantize == "fp8";
  serve.progress = !quiet;
  serve.log = log_line;

  hearth::ServerHandler handler(serve, memory_mb << 20, memory_fraction);
  hearth::broker::BrokerOptions options;
  options.socket_path = socket;
  options.server_name = "hearth-server";
  options.max_clients = max_clients;
  options.max_clients_per_uid = max_clients_per_uid;
  options.idle_timeout = std::chrono::milliseconds(idle_timeout_ms);
  options.quiet_timeout = std::chrono::milliseconds(quiet_timeout_ms);
  options.admin_uid = admin_uid;
  // The server's own uid and the admin's always get in; --allow-uid adds to them. Letting any
  // other uid in takes a socket and a directory it can reach: an admin uid of its own, without
  // --allow-uid, would otherwise be locked out by the 0700 directory.
  std::set<uid_t> allowed(allow_uids.begin(), allow_uids.end());
  allowed.insert(::geteuid());
  allowed.insert(admin_uid);
  if (allowed.size() > 1) {
    options.allowed_uids.assign(allowed.begin(), allowed.end());
    options.listen.socket_mode = 0666;
    options.listen.directory_mode = 0711;
    if (allow_uids.empty())
      log_line("admin uid " + std::to_string(admin_uid) +
               " is not the server's: the socket is opened to it (0666 in a 0711 directory; "
               "every peer's uid is still checked)");
  }
  // Binding first checks the socket's directory (owner, mode), takes the path's lock and clears a
  // stale socket: a mistake there fails in milliseconds, not after minutes of loading. Clients
  // that connect meanwhile wait in the backlog until the loop runs.
  hearth::broker::Broker broker(options, handler);
  if (allowed.size() > 1) warn_if_others_cannot_enter(socket);
  for (const hearth::ModelSpec& spec : specs)
    handler.add_model(hearth::load_served_model(spec, serve));
  log_line("ready: serving " + std::to_string(specs.size()) + " model(s) on " + socket + " (" +
           serve.backend + " backend, pid " + std::to_string(::getpid()) + ")");
  broker.run();
  handler.finish_loads();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return hearth::run_main("hearth-server", [&] { return run(argc, argv); });
}
