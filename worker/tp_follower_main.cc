// hearth-tp-follower: one tensor-parallel rank in a process of its own (issue 26). A worker
// with tensor_parallel_processes starts one per rank past 0, its channel as stdin; nobody else
// needs to run it.
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "ipc/main_guard.h"
#include "worker/leased_kv_factory.h"
#include "worker/model_identity.h"
#include "worker/tp/follower.h"
#include "worker/worker_model.h"

namespace {

int run(int argc, char** argv) {
  CLI::App app{
      "hearth-tp-follower: runs one tensor-parallel rank for the hearth-worker that started "
      "it (engine option tensor_parallel_processes), on the channel it was given: the leader "
      "sends the model and every step plan, the ranks' partial sums meet in shared memory (cpu) "
      "or in GPU memory each rank exports to the others (cuda). "
      "Started by the leader, not by hand."};
  int channel_fd = -1;
  app.add_option("--channel-fd", channel_fd,
                 "the descriptor of this rank's end of the leader's socketpair")
      ->required()
      ->check(CLI::Range(0, 1 << 20));
  CLI11_PARSE(app, argc, argv);
  const int fd = ::dup(channel_fd);  // owned from here, close-on-exec not needed: no exec follows
  if (fd < 0)
    throw std::runtime_error("--channel-fd " + std::to_string(channel_fd) + " is not open");
  ::close(channel_fd);
  hearth::WorkerModel model;  // outlives the backend run_tp_follower builds on its store
  std::vector<int> devices;   // served vmm: each rank's GPU, in this process's numbering
  const auto open = [&](const hearth::TpHello& hello) {
    if (!hello.server_socket.empty()) {
      // Served: only this rank's pieces. Their shapes are checked against the shard plan; the
      // degree the server sharded for must be the group's (a rank out of range is refused).
      hearth::ServedModelOptions served;
      served.rank = hello.rank;
      served.on_device = [&](const hearth::Manifest&, int device) {
        devices.assign(size_t(hello.rank) + 1, device);  // the lease asks for this rank's
      };
      model = hearth::attach_served_model(hello.server_socket, hello.model_name, served);
      if (model.identity != hello.model_identity)
        throw std::runtime_error("model '" + hello.model_name + "' at " + hello.server_socket +
                                 " is not the one the leader imported (its identity " +
                                 model.identity + " differs from the leader's " +
                                 hello.model_identity + ")");
      return model.store;
    }
    model = hearth::open_model_dir(hello.model_dir, hello.quantize_fp8);
    if (model.identity != hello.model_identity)
      throw std::runtime_error("the model at " + hello.model_dir +
                               " is not the one the leader opened (its identity " + model.identity +
                               " differs from the leader's " + hello.model_identity + ")");
    return model.store;
  };
  // Served ranks lease their KV pool from the server they imported from, as the worker leases
  // rank 0's: GPU ranks on their own GPU (vmm), CPU ranks from their device's budget in host
  // memory (memfd), sharing prefix blocks rank by rank when the leader's hello says so.
  const auto kv_lease = [&](bool share) -> hearth::KvMemoryFactory {
    if (!model.server) return nullptr;
    const bool on_gpu = model.store->residence() == hearth::Residence::Device;
    return hearth::make_leased_kv_factory(model.server, devices, on_gpu, share);
  };
  hearth::run_tp_follower(hearth::UniqueFd(fd), open, kv_lease);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return hearth::run_main("hearth-tp-follower", [&] { return run(argc, argv); });
}
