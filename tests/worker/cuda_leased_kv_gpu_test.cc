// The batched CUDA engine on a leased KV pool (issue 22): a served worker's pool is VMM chunks
// from a vmm hearth-server, mapped into one reserved device range that grows while requests
// wait and shrinks when idle. The block-major pool only moves addresses, so every request's
// tokens and logprobs are those of the same engine on its own pool, decode graphs included
// (they capture pointers into the range, whose base never moves). Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/temp_dir.h"
#include "tests/support/vmm_kv_server.h"
#include "worker/leased_kv_memory.h"
#include "tools/synth_model.h"
#include "weight-server/model/device_store.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/sharing/vmm_backend.h"
#include "worker/engine/cuda/cuda_batch_backend.h"
#include "worker/engine/engine.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

std::map<std::string, Outcome> run(Backend& backend, const EngineOptions& o,
                                   const std::vector<Request>& requests,
                                   const std::function<void()>& after_step = nullptr) {
  Engine engine(backend, o, nullptr, {});
  for (const Request& r : requests) engine.submit(r);
  std::map<std::string, Outcome> out;
  while (engine.has_work()) {
    const std::vector<RequestOutput> outputs = engine.step();
    if (after_step) after_step();
    for (const RequestOutput& step : outputs) {
      Outcome& r = out[step.id];
      for (const TokenOutput& t : step.tokens) {
        r.tokens.push_back(t.token);
        r.logprobs.push_back(t.logprob);
      }
      if (step.finish) {
        EXPECT_NE(step.finish->reason, FinishReason::Error) << step.finish->error;
      }
    }
  }
  return out;
}

// Prompts of 1 .. 700 tokens (some cross an attention split), greedy and sampled.
std::vector<Request> requests(int n, int vocab) {
  std::mt19937 rng(77);
  const int lengths[] = {1, 17, 100, 129, 513, 700};
  std::vector<Request> out;
  for (int i = 0; i < n; ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    for (int t = 0; t < lengths[i % 6]; ++t) r.prompt.push_back(int32_t(rng() % uint32_t(vocab)));
    r.settings.max_tokens = 4 + int(rng() % 24);
    r.settings.ignore_eos = true;
    r.settings.sampling.seed = rng();
    r.settings.sampling.temperature = i % 2 ? 0.9f : 0.0f;
    out.push_back(std::move(r));
  }
  return out;
}

TEST(CudaLeasedKv, ServedPoolGivesTheTokensOfTheOwnPool) {
  std::string why;
  if (!vmm_gpu_available(&why)) GTEST_SKIP() << why;
  const fs::path dir = test::process_scratch_dir() / "cuda_leased_kv";
  fs::remove_all(dir);
  SynthOptions synth;
  synth.preset = "tiny-llama3";
  synth.config_overrides = {{"hidden_size", 512},        {"num_attention_heads", 8},
                            {"num_key_value_heads", 2},  {"head_dim", 64},
                            {"intermediate_size", 1024}, {"vocab_size", 3000},
                            {"num_hidden_layers", 2}};
  write_synthetic_model(dir, synth);
  auto hf = std::make_shared<HfModel>(HfModel::open(dir));
  std::shared_ptr<const WeightStore> store = DeviceStore::upload(*hf, {});
  constexpr int kContext = 1024;
  EngineOptions o;
  o.max_batch_tokens = 256;
  o.max_running = 16;
  const std::vector<Request> all = requests(16, 3000);

  EngineOptions own = o;
  own.kv_pool_tokens = 16 * kContext;
  CudaBatchBackend alone_pool(store, own, kContext);
  const std::map<std::string, Outcome> want = run(alone_pool, own, all);

  test::VmmKvServer server;
  {
    std::shared_ptr<ipc::Client> client = server.client();
    std::shared_ptr<LeasedKvMemory> memory;
    int max_blocks = 0, min_blocks = 0;
    const KvMemoryFactory lease = [&](int64_t block_bytes, int most, int fewest, int) {
      max_blocks = most, min_blocks = fewest;
      memory = std::make_shared<LeasedKvMemory>(client, block_bytes, most, fewest,
                                                test::VmmKvServer::device_range());
      return memory;
    };
    CudaBatchBackend served(store, o, kContext, lease);
    ASSERT_TRUE(memory);
    EXPECT_EQ(served.kv_memory(), memory.get());
    EXPECT_EQ(min_blocks, kContext / o.kv_block_size);
    EXPECT_EQ(max_blocks, o.max_running * kContext / o.kv_block_size);
    const int first_blocks = memory->blocks();
    std::byte* const base = memory->base();

    // 16 requests of up to 727 positions want more than the first chunks: the pool grows.
    int peak = 0;
    const std::map<std::string, Outcome> got =
        run(served, o, all, [&] { peak = std::max(peak, memory->blocks()); });
    EXPECT_GT(served.decode_graphs(), 0);
    EXPECT_EQ(memory->base(), base) << "the reserved range never moves";
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [id, w] : want) {
      const Outcome& g = got.at(id);
      EXPECT_EQ(g.tokens, w.tokens) << id;
      ASSERT_EQ(g.logprobs.size(), w.logprobs.size()) << id;
      EXPECT_EQ(0, std::memcmp(g.logprobs.data(), w.logprobs.data(), w.logprobs.size() * 4))
          << id << ": logprobs differ in their bits";
    }
    // Grown past the first lease while requests waited (the engine asks before each step).
    EXPECT_GT(peak, first_blocks);
    const std::map<std::string, Outcome> again = run(served, o, all);
    for (const auto& [id, w] : want) EXPECT_EQ(again.at(id).tokens, w.tokens) << id << " again";
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hearth
