// The vmm backend on a real GPU: a hearth-server uploads into exportable VMM allocations, workers
// import every tensor and verify its checksum, a worker outlives its server, and served workers
// produce the same tokens as single-process mode on the CUDA engine. Skipped without a GPU.
#include <gtest/gtest.h>

#include "server_test_support.h"
#include "tools/synth_model.h"
#include "weight-server/sharing/model_import.h"
#include "weight-server/sharing/vmm_backend.h"

namespace hearth {
namespace {

using json = nlohmann::json;
using test::ServerProcess;

#define REQUIRE_GPU()                                  \
  do {                                                 \
    std::string why;                                   \
    if (!vmm_gpu_available(&why)) GTEST_SKIP() << why; \
  } while (0)

constexpr uint64_t kTwoMiB = 2ull << 20;

class ServerGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_GPU();
    // f32 weights: the server stores 2-D ones as bf16, so the manifest's checksums must follow
    // the conversion, not the file.
    SynthOptions synth;
    synth.dtype = DType::F32;
    synth.preset = "tiny-llama3";
    write_synthetic_model(synth_.path(), synth);
  }
  std::unique_ptr<ServerProcess> start_vmm_server() {
    return std::make_unique<ServerProcess>(std::vector<std::string>{
        "--backend", "vmm", "--model", test::tiny_model_dir().string() + ":tiny", "--model",
        synth_.path().string() + ":synth"});
  }
  std::vector<std::string> cuda_args(int seed, int tokens, bool ignore_eos = false) const {
    return test::generation_args(seed, tokens, ignore_eos, "cuda");
  }
  test::TempDir synth_, tmp_;
};

TEST_F(ServerGpuTest, WorkersImportAndVerifyEveryTensor) {
  auto server = start_vmm_server();
  for (const std::string name : {"tiny", "synth"}) {
    ipc::Client client = test::connect_client(server->socket());
    ImportedModel model = import_served_model(client, name, {.verify = true});
    EXPECT_EQ(model.manifest.backend, "vmm");
    EXPECT_EQ(vmm_device_for(model.manifest.gpu_uuid), 0);
    EXPECT_EQ(model.store->residence(), Residence::Device);
    EXPECT_STREQ(model.store->backend_name(), "vmm");
    ASSERT_EQ(model.store->tensors().size(), model.manifest.tensors.size());
    for (const ManifestTensor& t : model.manifest.tensors) {
      EXPECT_EQ(t.allocation_bytes % kTwoMiB, 0u) << t.info.name;
      if (t.info.shape.size() == 2) {
        EXPECT_NE(t.info.dtype, DType::F32) << t.info.name << " should be 16-bit";
      }
    }
    RecordProperty(name + "_attach_ms",
                   std::to_string(model.timings.manifest_ms + model.timings.gpu_ms +
                                  model.timings.import_ms + model.timings.map_ms));
  }
  // A real worker process, too.
  const test::WorkerRun run = test::run_worker(
      tmp_, test::concat({"--server", server->socket(), "--model", "synth", "--verify-weights"},
                         cuda_args(1, 8)));
  EXPECT_TRUE(run.status.success()) << run.err;
  const json stats = server->stats();
  EXPECT_EQ(stats["models"].size(), 2u);
  EXPECT_FALSE(stats["models"][0]["gpu_uuid"].get<std::string>().empty());
  EXPECT_GT(stats["models"][0]["load"]["copy_gb_per_s"].get<double>(), 0.0);
}

TEST_F(ServerGpuTest, ServedWorkersMatchSingleProcessOnCuda) {
  auto server = start_vmm_server();
  for (const auto& [model, dir] : {std::pair{std::string("tiny"), test::tiny_model_dir().string()},
                                   std::pair{std::string("synth"), synth_.path().string()}}) {
    for (int seed : {0, 7}) {
      const test::WorkerRun single =
          test::run_worker(tmp_, test::concat({"--model", dir}, cuda_args(seed, 32)));
      const test::WorkerRun served = test::run_worker(
          tmp_,
          test::concat({"--server", server->socket(), "--model", model}, cuda_args(seed, 32)));
      ASSERT_TRUE(single.status.success()) << single.err;
      ASSERT_TRUE(served.status.success()) << served.err;
      const test::Stream a = test::parse_stream(served.out), b = test::parse_stream(single.out);
      EXPECT_FALSE(a.tokens.empty());
      EXPECT_EQ(a.tokens, b.tokens) << model << " seed " << seed;
    }
  }
}

TEST_F(ServerGpuTest, WorkerSurvivesItsServer) {
  constexpr int kTokens = 400;
  auto server = start_vmm_server();
  // One import held by this process too, checked after the server is gone.
  ipc::Client client = test::connect_client(server->socket());
  ImportedModel held = import_served_model(client, "tiny");

  ChildProcess worker = test::start_piped(
      test::concat({test::binary("hearth-worker"), "--server", server->socket(), "--model", "tiny"},
                   cuda_args(3, kTokens, true)));
  const auto first = test::next_line(worker);
  ASSERT_TRUE(first) << "the worker produced no token";
  EXPECT_TRUE(worker.running());
  server->process().signal(SIGKILL);
  server->process().wait();

  const std::string out = *first + "\n" + test::rest_of_output(worker);
  EXPECT_TRUE(worker.wait().success());
  const test::WorkerRun single = test::run_worker(
      tmp_,
      test::concat({"--model", test::tiny_model_dir().string()}, cuda_args(3, kTokens, true)));
  const test::Stream a = test::parse_stream(out), b = test::parse_stream(single.out);
  EXPECT_EQ(a.tokens.size(), size_t(kTokens));
  EXPECT_EQ(a.tokens, b.tokens);
  // The exporting process is gone; the driver keeps the memory for whoever still maps it.
  EXPECT_NO_THROW(verify_weights(*held.store, held.manifest));
}

TEST_F(ServerGpuTest, MemfdServerOnAGpuMachineStillServesCpuWorkers) {
  ServerProcess server(
      {"--backend", "memfd", "--model", test::tiny_model_dir().string() + ":tiny"});
  // backend auto: memfd weights run on the CPU engine even where a GPU is present.
  std::vector<std::string> args = {"--server", server.socket(), "--model", "tiny",     "--prompt",
                                   "Hi",       "--max-tokens",  "4",       "--format", "jsonl"};
  const test::WorkerRun run = test::run_worker(tmp_, args);
  EXPECT_TRUE(run.status.success()) << run.err;
}

}  // namespace
}  // namespace hearth
