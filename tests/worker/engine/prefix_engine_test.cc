// Prefix caching through the engine, on the CPU backend: requests that share a prefix get bit-
// identical tokens and logprobs with the cache on and off (through chunking, sharing while in
// flight, eviction and preemption); hits come after a request finished, while one is running
// and after partial eviction, never across salts; cached_tokens and the stats say what was
// found; the pool ends with every block free; a full pool evicts before anyone waits.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include "tests/support/temp_dir.h"
#include "tools/synth_model.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/sharing/manifest.h"
#include "worker/engine/cpu_backend.h"
#include "worker/engine/engine.h"
#include "worker/engine/event_json.h"
#include "worker/model_identity.h"
#include "worker/worker_model.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

fs::path synthetic_dir(const std::string& name, uint64_t seed) {
  const fs::path dir = test::process_scratch_dir() / ("prefix_test_" + name);
  fs::remove_all(dir);
  SynthOptions opt;
  opt.preset = "tiny-llama3";
  opt.seed = seed;
  write_synthetic_model(dir, opt);
  return dir;
}

const WorkerModel& model() {
  static const WorkerModel m = open_model_dir(synthetic_dir("llama3", 1));
  return m;
}

constexpr int kContext = 128;

// Everything a request produced, bit for bit.
struct Result {
  std::vector<int32_t> tokens;
  std::vector<uint32_t> logprob_bits;
  std::vector<std::vector<TokenLogprob>> top;
  std::string reason;
  int cached_tokens = -1;
  nlohmann::json done_event;

  void add(const RequestOutput& out) {
    for (const TokenOutput& t : out.tokens) {
      tokens.push_back(t.token);
      uint32_t bits;
      std::memcpy(&bits, &t.logprob, 4);
      logprob_bits.push_back(bits);
      top.push_back(t.top_logprobs);
    }
    if (out.finish) {
      reason = finish_reason_name(out.finish->reason);
      cached_tokens = out.finish->cached_tokens;
      done_event = done_event_json(out.id, *out.finish);
    }
  }
  bool same_tokens(const Result& o) const {
    return tokens == o.tokens && logprob_bits == o.logprob_bits && top == o.top &&
           reason == o.reason;
  }
};

struct Outcome {
  std::map<std::string, Result> results;
  EngineStats last;
  int max_waiting = 0;
};

// Steps until everything submitted has finished, recording every output.
void drain(Engine& engine, Outcome& run) {
  while (engine.has_work()) {
    for (const RequestOutput& out : engine.step()) run.results[out.id].add(out);
    run.max_waiting = std::max(run.max_waiting, engine.stats().waiting);
  }
  run.last = engine.stats();
}

Outcome run_all(const std::vector<Request>& requests, EngineOptions options, KvPoolShape pool) {
  CpuBackend backend(model().store, kContext, pool);
  Engine engine(backend, options, nullptr, {}, model().identity);
  for (const Request& r : requests) engine.submit(r);
  Outcome run;
  drain(engine, run);
  return run;
}

std::vector<int32_t> ids(int n, int salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i)
    t[i] = int32_t(1 + (uint64_t(i) * 7919 + uint64_t(salt) * 104729) % 200);
  return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Request request(const std::string& id, std::vector<int32_t> prompt, int max_tokens = 6) {
  Request r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.settings.max_tokens = max_tokens;
  r.settings.ignore_eos = true;
  r.settings.sampling.temperature = 0;
  return r;
}

// Fourteen requests behind one 40-token prefix: suffixes of 0 to 12 tokens, some prompts
// repeated, greedy and sampled, with and without top logprobs, and one with its own salt.
std::vector<Request> shared_prefix_requests() {
  const std::vector<int32_t> prefix = ids(40, 1);
  std::vector<Request> out;
  for (int i = 0; i < 14; ++i) {
    Request r = request("r" + std::to_string(i), concat(prefix, ids((i % 7) * 2, 100 + i % 7)),
                        4 + (i * 5) % 11);
    if (r.prompt.size() == prefix.size()) r.prompt.push_back(7);
    RequestSettings& s = r.settings;
    s.sampling.seed = uint64_t(500 + i);
    if (i % 2) s.sampling.temperature = 0.9f, s.sampling.top_p = 0.9f;
    if (i % 3 == 1) s.sampling.temperature = 1.1f, s.sampling.top_k = 20;
    if (i % 4 == 0) s.logprobs = 2;
    if (i == 13) s.cache_salt = "tenant-b";
    out.push_back(std::move(r));
  }
  return out;
}

void expect_same(const Outcome& off, const Outcome& on, const std::string& what) {
  ASSERT_EQ(off.results.size(), on.results.size()) << what;
  for (const auto& [id, r] : off.results) {
    ASSERT_TRUE(on.results.contains(id)) << what << " " << id;
    EXPECT_TRUE(r.same_tokens(on.results.at(id))) << what << " " << id;
    EXPECT_EQ(r.cached_tokens, 0) << what << " " << id << ": the cache was off";
  }
  EXPECT_EQ(off.last.prefix_cache_hits, 0u) << what;
  EXPECT_EQ(off.last.prefix_cache_blocks, 0) << what;
  EXPECT_EQ(on.last.kv_blocks_used, 0) << what << ": blocks leaked";
  EXPECT_EQ(off.last.kv_blocks_used, 0) << what << ": blocks leaked";
}

TEST(PrefixCacheEngine, OutputsAreBitIdenticalWithTheCacheOnAndOff) {
  const std::vector<Request> requests = shared_prefix_requests();
  for (auto [budget, block] : {std::pair{2048, 16}, {7, 4}, {24, 8}, {50, 1}}) {
    EngineOptions options;
    options.max_batch_tokens = budget;
    const KvPoolShape pool{block, (14 * kContext + block - 1) / block};
    options.prefix_cache = false;
    const Outcome off = run_all(requests, options, pool);
    options.prefix_cache = true;
    const Outcome on = run_all(requests, options, pool);
    const std::string what = "budget " + std::to_string(budget) + " block " + std::to_string(block);
    expect_same(off, on, what);
    EXPECT_LE(on.last.prefix_cache_hits, on.last.prefix_cache_queries) << what;
    EXPECT_GT(on.last.prefix_cache_hits, 0u) << what << ": nothing was shared";
    EXPECT_LT(on.last.forwarded_tokens, off.last.forwarded_tokens) << what;
    // The salted request shares with nobody.
    EXPECT_EQ(on.results.at("r13").cached_tokens, 0) << what;
  }
}

TEST(PrefixCacheEngine, AFinishedRequestsPromptIsFoundWithCachedTokensInItsFinalEvent) {
  CpuBackend backend(model().store, kContext, {16, 40});
  Engine engine(backend, {}, nullptr, {}, model().identity);
  Outcome run;
  engine.submit(request("a", ids(40, 3)));
  drain(engine, run);
  EXPECT_EQ(run.results.at("a").cached_tokens, 0);
  engine.submit(request("b", ids(40, 3)));  // 40 tokens, blocks of 16, all shared: 32 found
  drain(engine, run);
  const Result& b = run.results.at("b");
  EXPECT_EQ(b.cached_tokens, 32);
  EXPECT_EQ(b.done_event["cached_tokens"], 32);
  EXPECT_TRUE(b.same_tokens(run.results.at("a")));
  EXPECT_EQ(run.last.prefix_cache_queries, 80u);
  EXPECT_EQ(run.last.prefix_cache_hits, 32u);
  EXPECT_EQ(run.last.kv_blocks_used, 0);
  EXPECT_GT(run.last.prefix_cache_blocks, 0);
  engine.drop_prefix_cache();
  EXPECT_EQ(engine.stats().prefix_cache_blocks, 0);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

// A conversation that sends its history again: the blocks holding the generated tokens are
// cached too.
TEST(PrefixCacheEngine, GeneratedTokensAreCachedForTheNextTurn) {
  CpuBackend backend(model().store, kContext, {8, 40});
  Engine engine(backend, {}, nullptr, {}, model().identity);
  Outcome run;
  engine.submit(request("turn1", ids(30, 4), 20));  // 49 positions computed: 6 full blocks
  drain(engine, run);
  const std::vector<int32_t> history = concat(ids(30, 4), run.results.at("turn1").tokens);
  engine.submit(request("turn2", concat(history, ids(5, 5))));
  drain(engine, run);
  EXPECT_EQ(run.results.at("turn2").cached_tokens, 48);
}

// A burst of requests with one prompt computes it once: the others wait a step for its blocks
// rather than compute them beside it.
TEST(PrefixCacheEngine, ABurstWithOnePromptComputesItOnce) {
  std::vector<Request> requests;
  for (int i = 0; i < 4; ++i) requests.push_back(request("r" + std::to_string(i), ids(64, 6), 5));
  const Outcome on = run_all(requests, {}, {8, 60});
  EngineOptions off_options;
  off_options.prefix_cache = false;
  const Outcome off = run_all(requests, off_options, {8, 60});
  expect_same(off, on, "burst");
  EXPECT_EQ(on.results.at("r0").cached_tokens, 0);
  for (const char* id : {"r1", "r2", "r3"}) EXPECT_EQ(on.results.at(id).cached_tokens, 56) << id;
  // 64 prompt tokens once, 8 (the block holding the last token) for each other, 4 decodes each.
  EXPECT_EQ(on.last.forwarded_tokens, 64u + 3 * 8 + 4 * 4);
  EXPECT_EQ(off.last.forwarded_tokens, 4 * 64u + 4 * 4);
}

// A request that arrives while another with its prompt is still computing it (in chunks)
// shares the blocks computed so far, and then the rest, before that one has finished.
TEST(PrefixCacheEngine, RequestsInFlightShareBlocksAsSoonAsTheyAreComputed) {
  CpuBackend backend(model().store, kContext, {8, 60});
  EngineOptions options;
  options.max_batch_tokens = 20;
  Engine engine(backend, options, nullptr, {}, model().identity);
  Outcome run;
  engine.submit(request("a", ids(64, 12), 30));
  for (int i = 0; i < 2; ++i)  // a computes 40 of its 64 tokens
    for (const RequestOutput& out : engine.step()) run.results[out.id].add(out);
  engine.submit(request("b", ids(64, 12), 30));
  bool overlapped = false;
  while (engine.has_work()) {
    for (const RequestOutput& out : engine.step()) run.results[out.id].add(out);
    overlapped |= engine.stats().running == 2;
  }
  EXPECT_TRUE(overlapped);
  EXPECT_EQ(run.results.at("b").cached_tokens, 56);
  EXPECT_TRUE(run.results.at("b").same_tokens(run.results.at("a")));
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

// Cached blocks evicted least recently released first: a request that comes back after
// another one took part of the pool finds the blocks that are left.
TEST(PrefixCacheEngine, AHitAfterPartialEvictionFindsTheSurvivingBlocks) {
  CpuBackend backend(model().store, kContext, {8, 12});
  Engine engine(backend, {}, nullptr, {}, model().identity);
  Outcome run;
  engine.submit(request("a", ids(64, 7), 4));  // 9 blocks; 8 full ones cached
  drain(engine, run);
  EXPECT_EQ(run.last.prefix_cache_blocks, 8);
  engine.submit(request("other", ids(40, 8), 4));  // 6 blocks: 3 never used, then a's last 3
  drain(engine, run);
  EXPECT_EQ(run.last.prefix_cache_evicted_blocks, 2u);  // a's 9th block was never cached
  engine.submit(request("again", ids(64, 7), 4));
  drain(engine, run);
  EXPECT_EQ(run.results.at("again").cached_tokens, 48);
  EXPECT_TRUE(run.results.at("again").same_tokens(run.results.at("a")));
  EXPECT_EQ(run.last.kv_blocks_used, 0);
}

TEST(PrefixCacheEngine, ADifferentSaltNeverHits) {
  CpuBackend backend(model().store, kContext, {8, 40});
  Engine engine(backend, {}, nullptr, {}, model().identity);
  Outcome run;
  auto salted = [](const std::string& id, const std::string& salt) {
    Request r = request(id, ids(40, 9));
    r.settings.cache_salt = salt;
    return r;
  };
  for (const auto& [id, salt] :
       {std::pair{"a", "tenant-a"}, {"b", "tenant-b"}, {"none", ""}, {"a-again", "tenant-a"}}) {
    engine.submit(salted(id, salt));
    drain(engine, run);
  }
  EXPECT_EQ(run.results.at("b").cached_tokens, 0);
  EXPECT_EQ(run.results.at("none").cached_tokens, 0);
  EXPECT_EQ(run.results.at("a-again").cached_tokens, 32);
  EXPECT_TRUE(run.results.at("b").same_tokens(run.results.at("a")));
}

// The model identities the worker gives the engine differ for other weights and match for the
// same ones, so no engine could take another model's blocks for its own.
TEST(PrefixCacheEngine, ModelIdentitiesTellModelsApart) {
  const WorkerModel other = open_model_dir(synthetic_dir("llama3_other", 2));
  EXPECT_NE(other.identity, model().identity);
  EXPECT_EQ(open_model_dir(model().source->dir()).identity, model().identity);
  Manifest m;
  m.tensors.resize(2);
  m.tensors[0].info.name = "a", m.tensors[1].info.name = "b";
  const std::string served = model_identity(m);
  m.tensors[1].xxh3 = 1;  // one tensor's bytes differ
  EXPECT_NE(model_identity(m), served);
  // And the engine's domain follows them: the same request on another model, or another
  // numerics option, would look for other keys (tests/worker/engine/prefix_cache_test.cc).
}

// A pool full of cached blocks nobody holds: a request that needs the whole pool runs at once,
// evicting them, rather than waiting.
TEST(PrefixCacheEngine, AFullPoolEvictsCachedBlocksBeforeARequestWaits) {
  CpuBackend backend(model().store, kContext, {8, 12});
  Engine engine(backend, {}, nullptr, {}, model().identity);
  Outcome run;
  engine.submit(request("a", ids(64, 10), 4));
  drain(engine, run);
  ASSERT_EQ(run.last.prefix_cache_blocks, 8);
  engine.submit(request("big", ids(90, 11), 6));  // 95 positions: all 12 blocks
  run.max_waiting = 0;
  drain(engine, run);
  EXPECT_EQ(run.max_waiting, 0);
  EXPECT_EQ(run.results.at("big").reason, "length");
  EXPECT_EQ(run.last.prefix_cache_evicted_blocks, 8u);
  EXPECT_EQ(run.last.kv_blocks_used, 0);
}

// A pool too small for the shared-prefix set: preempted sequences find their blocks again
// when recomputed, and every token is what it is with the cache off.
TEST(PrefixCacheEngine, PreemptionWithTheCacheGivesTheSameTokens) {
  const std::vector<Request> requests = shared_prefix_requests();
  for (int block : {4, 16}) {
    EngineOptions options;
    options.prefix_cache = false;
    const Outcome off = run_all(requests, options, {block, kContext / block});
    options.prefix_cache = true;
    const Outcome on = run_all(requests, options, {block, kContext / block});
    expect_same(off, on, "tiny pool, block " + std::to_string(block));
    EXPECT_GT(on.last.preemptions, 0u) << "block " << block;
    EXPECT_GT(on.last.prefix_cache_hits, 0u) << "block " << block;
  }
}

TEST(PrefixCacheEngine, TheOptionOffMeansNoLookupsAndNoRegistration) {
  EngineOptions options;
  options.prefix_cache = false;
  const Outcome off = run_all(shared_prefix_requests(), options, {16, 120});
  EXPECT_EQ(off.last.prefix_cache_queries, 0u);
  EXPECT_EQ(off.last.prefix_cache_hits, 0u);
  EXPECT_EQ(off.last.prefix_cache_blocks, 0);
  EXPECT_EQ(off.last.prefix_cache_evicted_blocks, 0u);
}

}  // namespace
}  // namespace hearth
