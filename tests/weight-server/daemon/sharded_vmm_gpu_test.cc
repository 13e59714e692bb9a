// Tensor-parallel weights on several GPUs (issue 26): `hearth-server --backend vmm
// --tensor-parallel 2` puts rank r's pieces on GPU r. A client importing rank 1 reads back, from
// GPU 1, exactly the shard plan's piece of each source tensor; importing every rank maps each on
// its own GPU; `stats` and `list` show each GPU's weights; an import that fails midway keeps
// nothing, and a killed server's shards are freed on every GPU; with --quantize fp8 each GPU
// holds its rank's codes and scales. Skipped with fewer than 2 GPUs.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>
#include <signal.h>

#include "server_test_support.h"
#include "tools/synth_model.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/model/quantize_at_load.h"
#include "weight-server/model/shard_plan.h"
#include "weight-server/model/vmm_allocation.h"
#include "weight-server/sharing/model_import.h"
#include "weight-server/sharing/vmm_backend.h"

namespace hearth {
namespace {

using json = nlohmann::json;
using test::ServerProcess;

constexpr uint64_t kTwoMiB = 2ull << 20;
// Set in the child process of ARenumberedProcessFindsItsRankByUuid: the server's socket.
constexpr const char* kChildSocket = "HEARTH_TEST_TP_SOCKET";

uint64_t free_bytes(int device) {
  EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
  size_t free = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  return free;
}

// The device a pointer's memory lives on, as the runtime sees it.
int device_of(const void* p) {
  cudaPointerAttributes a{};
  EXPECT_EQ(cudaPointerGetAttributes(&a, p), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  return a.device;
}

// Every piece of `view` (one rank's manifest) as stored in `store`, copied back from its GPU,
// equals the plan's piece cut from the source tensor on the host.
void expect_pieces_equal_the_plan(const HfModel& source, const Manifest& view, int rank,
                                  const WeightStore& store, int device) {
  const ShardPlan plan = ShardPlan::make(source.config(), view.tensor_parallel);
  ASSERT_EQ(view.tensors.size(), plan.tensors(rank).size());
  for (size_t i = 0; i < view.tensors.size(); ++i) {
    const TensorShard& shard = plan.tensors(rank)[i];
    const HfTensor& full = *source.find(shard.name);
    std::vector<std::byte> want(shard_bytes(shard, dtype_size(full.info.dtype)));
    copy_shard(shard, dtype_size(full.info.dtype), full.data, want);
    const StoredTensor& got = store.at(shard.name);
    ASSERT_EQ(got.info.bytes, want.size()) << shard.name;
    EXPECT_EQ(view.tensors[i].allocation_bytes % kTwoMiB, 0u) << shard.name;
    EXPECT_EQ(device_of(got.data), device) << shard.name;
    std::vector<std::byte> back(want.size());
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(back.data(), got.data, back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(back.data(), want.data(), want.size()), 0) << shard.name;
  }
}

class ShardedVmmGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The renumbering test's child sees one GPU on purpose.
    if (!std::getenv(kChildSocket) && vmm_device_count() < 2)
      GTEST_SKIP() << "needs 2 GPUs, this machine has " << vmm_device_count();
    write_synthetic_model(synth_.path(), SynthOptions{});  // bf16, 2 KV heads
  }
  std::unique_ptr<ServerProcess> start(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--backend", "vmm",     "--tensor-parallel",
                                     "2",         "--model", synth_.path().string() + ":synth"};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<ServerProcess>(args);
  }
  test::TempDir synth_, tmp_;
};

TEST_F(ShardedVmmGpuTest, RankOneReadsItsPiecesBackFromGpuOne) {
  auto server = start();
  const HfModel source = HfModel::open(synth_.path());
  ipc::Client client = test::connect_client(server->socket());
  ImportedModel model = import_served_model(client, "synth", {.verify = true, .rank = 1});
  EXPECT_EQ(model.manifest.backend, "vmm");
  EXPECT_EQ(model.manifest.devices, (std::vector<int>{0, 1}));
  EXPECT_EQ(model.manifest.device_uuids[1], cuda_device_uuid(1));
  EXPECT_EQ(model.manifest.gpu_uuid, model.manifest.device_uuids[1]);  // the rank's own GPU
  EXPECT_EQ(model.store->residence(), Residence::Device);
  expect_pieces_equal_the_plan(source, model.manifest, 1, *model.store, 1);

  // stats: each GPU holds its rank's pieces; list: each rank's device and UUID.
  const json stats = server->stats();
  ASSERT_EQ(stats["gpus"].size(), 2u) << stats.dump();
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(stats["gpus"][d]["device"], d);
    EXPECT_GT(stats["gpus"][d]["weights_bytes"].get<uint64_t>(), 0u);
  }
  const test::WorkerRun list =
      test::run_binary("hearth-ctl", server->dir(), {"--socket", server->socket(), "list"});
  ASSERT_TRUE(list.status.success()) << list.err;
  const json ranks = json::parse(list.out)["models"][0]["ranks"];
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[1]["device"], 1);
  EXPECT_EQ(ranks[1]["gpu_uuid"], model.manifest.device_uuids[1]);
}

// A process that sees only GPU 1 (CUDA_VISIBLE_DEVICES=1) numbers it 0, not 1: importing rank 1
// finds it by its UUID all the same. The test binary runs itself as that process.
TEST_F(ShardedVmmGpuTest, ARenumberedProcessFindsItsRankByUuid) {
  const std::string name = "ShardedVmmGpuTest.ARenumberedProcessFindsItsRankByUuid";
  if (const char* socket = std::getenv(kChildSocket)) {
    ASSERT_EQ(vmm_device_count(), 1);
    ipc::Client client = test::connect_client(socket);
    ImportedModel model = import_served_model(client, "synth", {.verify = true, .rank = 1});
    EXPECT_EQ(model.manifest.devices[1], 1);  // the server's numbering
    EXPECT_EQ(model.manifest.gpu_uuid, cuda_device_uuid(0));
    EXPECT_EQ(device_of(model.store->tensors()[0].data), 0);
    return;
  }
  auto server = start();
  const std::string log = (tmp_.path() / "child.log").string();
  ChildProcess child = ChildProcess::spawn(
      ChildProcess::Options(
          {std::filesystem::read_symlink("/proc/self/exe").string(), "--gtest_filter=" + name})
          .with_env({"CUDA_VISIBLE_DEVICES=1", std::string(kChildSocket) + "=" + server->socket()})
          .stdout_to(ChildProcess::Stream::file(log))
          .stderr_to(ChildProcess::Stream::file(log + ".err")));
  EXPECT_TRUE(child.wait().success()) << test::read_file(log) << test::read_file(log + ".err");
  // It ran, and was not skipped.
  EXPECT_NE(test::read_file(log).find("[       OK ] " + name), std::string::npos)
      << test::read_file(log);
}

TEST_F(ShardedVmmGpuTest, AllRanksMapEachOnItsOwnGpu) {
  auto server = start();
  const HfModel source = HfModel::open(synth_.path());
  ipc::Client client = test::connect_client(server->socket());
  ImportedModel model = import_served_model(client, "synth", {.verify = true, .all_ranks = true});
  ASSERT_EQ(model.ranks.size(), 2u);
  for (int r = 0; r < 2; ++r)
    expect_pieces_equal_the_plan(source, model.manifest.rank_view(r), r, *model.ranks[size_t(r)],
                                 r);
}

// --quantize fp8 (issue 25): the model is quantized whole, then cut; each GPU holds its rank's
// codes and scales (q/k/v, gate/up: its rows'; o, down: the whole vector), F32 scales not
// rounded to bf16.
TEST_F(ShardedVmmGpuTest, Fp8PiecesAreTheWholeQuantizedModelsSlices) {
  auto server = start({"--quantize", "fp8"});
  const HfModel source = quantize_fp8_at_load(HfModel::open(synth_.path()), 2);
  ipc::Client client = test::connect_client(server->socket());
  ImportedModel model = import_served_model(client, "synth", {.verify = true, .all_ranks = true});
  ASSERT_TRUE(model.manifest.config.quantization.fp8());
  ASSERT_EQ(model.ranks.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    expect_pieces_equal_the_plan(source, model.manifest.rank_view(r), r, *model.ranks[size_t(r)],
                                 r);
    EXPECT_EQ(model.ranks[size_t(r)]->at("model.layers.0.self_attn.o_proj.weight_scale").info.dtype,
              DType::F32);
  }
}

TEST_F(ShardedVmmGpuTest, DevicesListPutsRanksWhereItSays) {
  auto server = start({"--devices", "1,0"});
  ipc::Client client = test::connect_client(server->socket());
  ImportedModel model = import_served_model(client, "synth", {.rank = 0});
  EXPECT_EQ(model.manifest.devices, (std::vector<int>{1, 0}));
  EXPECT_EQ(device_of(model.store->tensors()[0].data), 1);
}

// --gpu-memory-fraction is each GPU's: a rank whose pieces pass its device's share is refused
// at load, naming the GPU, before anything is uploaded; a device list that cannot work, too.
TEST_F(ShardedVmmGpuTest, RefusesWhatDoesNotFitOrIsNotThere) {
  const std::string model = synth_.path().string() + ":synth";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--tensor-parallel", "2", "--gpu-memory-fraction", "0.01", "--memory-mb", "1"},
       "that --gpu-memory-fraction allows on GPU 0 (GPU-"},
      {{"--tensor-parallel", "2", "--devices", "1,1"}, "device 1 is named twice"},
      {{"--tensor-parallel", "2", "--devices", std::to_string(vmm_device_count()) + ",0"},
       "device " + std::to_string(vmm_device_count()) + " is not present"},
      {{"--tensor-parallel", std::to_string(vmm_device_count() + 1)},
       "needs " + std::to_string(vmm_device_count() + 1) + " GPUs (one per rank)"},
  };
  for (const auto& [flags, expect] : cases) {
    std::vector<std::string> args = {"--backend", "vmm", "--model", model};
    args.insert(args.end(), flags.begin(), flags.end());
    ServerProcess server(args, false);
    EXPECT_FALSE(server.process().wait().success());
    EXPECT_NE(server.log().find(expect), std::string::npos) << server.log();
  }
}

// A KV lease names its rank's device: the chunk is taken from that GPU's budget, which `stats`
// reports with its GPU, and a device the server does not have is refused by name.
TEST_F(ShardedVmmGpuTest, KvLeasesComeFromTheDeviceTheyName) {
  auto server = start({"--devices", "1,0"});
  ipc::Client client = test::connect_client(server->socket());
  const ipc::Frame granted = client.call(
      ipc::op::kKvLease, ipc::make_kv_lease_args(ipc::KvLeaseRequest{kTwoMiB, 1, 1, 1}));
  ASSERT_EQ(granted.body.at("chunks").size(), 1u);
  const json devices = server->stats()["kv_devices"];
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[1]["gpu"], 0);  // rank 1 of `--devices 1,0` is GPU 0
  EXPECT_EQ(devices[1]["kv_bytes"].get<uint64_t>(), kTwoMiB);
  EXPECT_EQ(devices[0]["gpu"], 1);
  EXPECT_EQ(devices[0]["kv_bytes"].get<uint64_t>(), 0u);
  try {
    client.call(ipc::op::kKvLease, ipc::make_kv_lease_args(ipc::KvLeaseRequest{kTwoMiB, 1, 1, 2}));
    FAIL() << "a lease on device 2 of a server of 2 devices was granted";
  } catch (const ipc::ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("device 2 is not a KV device of this server (it has 2"),
              std::string::npos)
        << e.what();
  }
}

// An import that fails on its last piece keeps none of the others (were one still mapped here,
// the killed server's memory on GPU 1 could not come back), and a rank whose GPU this process
// cannot see is refused before any descriptor is taken.
TEST_F(ShardedVmmGpuTest, FailedImportsKeepNothingAndAKilledServersShardsAreFreed) {
  const uint64_t before[2] = {free_bytes(0), free_bytes(1)};
  auto server = start();
  const json gpus = server->stats()["gpus"];
  uint64_t held[2], during[2];
  for (int d = 0; d < 2; ++d) {
    held[d] = gpus[d]["weights_bytes"].get<uint64_t>();
    during[d] = free_bytes(d);
    EXPECT_LE(during[d] + held[d], before[d]) << "device " << d;
  }
  {
    ipc::Client client = test::connect_client(server->socket());
    FetchedManifest fetched = fetch_manifest(client, "synth");
    Manifest view = fetched.manifest.rank_view(1);
    std::vector<UniqueFd> fds = client.import_allocations("synth", view.allocation_ids());
    view.tensors.back().allocation_bytes += kTwoMiB;  // the last piece cannot map
    EXPECT_THROW(import_vmm_store(view, std::move(fds), 1), std::runtime_error);

    Manifest elsewhere = fetched.manifest;
    elsewhere.device_uuids[1] = "GPU-ffffffff-ffff-ffff-ffff-ffffffffffff";
    try {
      vmm_devices_for_ranks(elsewhere);
      FAIL() << "a missing GPU was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1: "), std::string::npos) << e.what();
    }
  }
  server->process().signal(SIGKILL);
  server->process().wait();
  // The driver frees a dead process's memory on its own time: poll for it (the test's timeout
  // bounds a leak), each device's weights back at least.
  for (int d = 0; d < 2; ++d) {
    const auto deadline = test::patience_deadline();
    while (free_bytes(d) < during[d] + held[d] && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    EXPECT_GE(free_bytes(d), during[d] + held[d]) << "device " << d << "'s shards were not freed";
  }
}

}  // namespace
}  // namespace hearth
