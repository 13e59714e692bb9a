// The engine with many requests in flight, on the CPU backend: every request's tokens, logprobs
// and text are bit-identical to the same request run alone, whatever else runs, whatever the
// token budget, block size or pool size, through preemption and cancellation; bad requests are
// refused with a message naming the field while the others finish; the pool ends empty.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "tests/support/paths.h"
#include "tests/support/temp_dir.h"
#include "tests/worker/engine/engine_outcomes.h"
#include "tests/worker/engine/synth_models.h"
#include "tools/synth_model.h"
#include "weight-server/model/host_store.h"
#include "worker/engine/cpu_backend.h"
#include "worker/engine/engine.h"
#include "worker/engine/generator.h"
#include "tokenizer/tokenizer.h"
#include "worker/worker_model.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

// A model with its tokenizer and end-of-sequence ids, so text and stop strings take part.
struct Model {
  WorkerModel model;
  std::optional<Tokenizer> tokenizer;
  std::vector<int32_t> eos;
};

Model open_model(const fs::path& dir) {
  Model m;
  m.model = open_model_dir(dir);
  m.tokenizer = Tokenizer::from_json(m.model.tokenizer_json);
  m.eos = end_of_sequence_ids(m.model, &*m.tokenizer);
  return m;
}

// The default model: real text, real stop strings, real end-of-sequence.
const Model& default_model() {
  static const Model m = open_model(test::source_dir() / "models/hearth-tiny-fortunes");
  return m;
}

// Most tests run on a synthetic Llama 3 (64 wide, 2 layers, a byte-level BPE tokenizer): the
// same code paths as the default model at a fiftieth of the cost, which sanitizer builds need.
const Model& synthetic_llama3() {
  static const Model m = [] {
    const fs::path dir = test::process_scratch_dir() / "engine_test_llama3";
    fs::remove_all(dir);
    SynthOptions opt;
    opt.preset = "tiny-llama3";
    write_synthetic_model(dir, opt);
    return open_model(dir);
  }();
  return m;
}

// A synthetic model of another architecture (Qwen3: q/k norms, GQA), token ids only.
std::shared_ptr<const WeightStore> synthetic_qwen3() {
  static std::shared_ptr<const WeightStore> store = [] {
    const fs::path dir = test::process_scratch_dir() / "engine_test_qwen3";
    fs::remove_all(dir);
    SynthOptions opt;
    opt.preset = "tiny-qwen3";
    write_synthetic_model(dir, opt);
    return std::make_shared<HostStore>(std::make_shared<HfModel>(HfModel::open(dir)));
  }();
  return store;
}

// Everything a request produced, for exact comparison.
struct Result {
  std::vector<int32_t> tokens;
  std::vector<uint32_t> logprob_bits;  // bit patterns: NaN-safe and exact
  std::vector<std::vector<TokenLogprob>> top;
  std::string text;
  std::string reason;
  int generated = -1;

  void add(const RequestOutput& out) {
    for (const TokenOutput& t : out.tokens) {
      tokens.push_back(t.token);
      uint32_t bits;
      std::memcpy(&bits, &t.logprob, 4);
      logprob_bits.push_back(bits);
      top.push_back(t.top_logprobs);
      text += t.visible;
    }
    if (out.finish) {
      text += out.finish->final_visible;
      reason = finish_reason_name(out.finish->reason);
      generated = out.finish->generated_tokens;
    }
  }
  bool operator==(const Result&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Result& r) {
  os << r.reason << " " << r.generated << " tokens:";
  for (int32_t t : r.tokens) os << " " << t;
  return os << " text '" << r.text << "'";
}

Result run_alone(const std::shared_ptr<const WeightStore>& store, const Tokenizer* tokenizer,
                 const std::vector<int32_t>& eos, const Request& request, int context) {
  CpuBackend backend(store, context);
  Result r;
  generate(backend, tokenizer, {request.prompt, request.settings, eos},
           [&](const RequestOutput& out) { r.add(out); });
  return r;
}

struct Outcome {
  std::map<std::string, Result> results;
  EngineStats last;
  int max_waiting = 0, max_running = 0, max_batch = 0;
};

Outcome run_together(Engine& engine, const std::vector<Request>& requests) {
  for (const Request& r : requests) engine.submit(r);
  Outcome run;
  while (engine.has_work()) {
    for (const RequestOutput& out : engine.step()) run.results[out.id].add(out);
    const EngineStats s = engine.stats();
    run.max_waiting = std::max(run.max_waiting, s.waiting);
    run.max_running = std::max(run.max_running, s.running);
    run.max_batch = std::max(run.max_batch, s.last_step_sequences);
  }
  run.last = engine.stats();
  return run;
}

// Twenty requests over the default model: prompts of 1 to ~40 tokens, greedy and every
// sampling rule, penalties, seeds, stop strings, top-N logprobs, eos on and off.
std::vector<Request> mixed_requests(const Tokenizer& tokenizer) {
  const char* prompts[] = {"A computer",
                           "Never trust a computer you can't throw out a window, because",
                           "The meaning of life is",
                           "Once upon a time, in a village at the edge of the forest, there "
                           "lived an old programmer who had never seen the sea",
                           "Tomorrow",
                           "Why do programmers prefer dark mode?",
                           "Dear Sir,\n\nI write to inform you that",
                           "CYNIC, n."};
  std::vector<Request> out;
  for (int i = 0; i < 20; ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    r.prompt = tokenizer.encode(prompts[i % 8], /*add_special_tokens=*/true);
    if (i == 5) r.prompt = {r.prompt[0]};  // a one-token prompt
    RequestSettings& s = r.settings;
    s.max_tokens = 4 + (i * 7) % 24;
    s.sampling.seed = uint64_t(1000 + i);
    switch (i % 5) {
      case 0:
        s.sampling.temperature = 0;
        break;
      case 1:
        s.sampling.temperature = 0.8f, s.sampling.top_p = 0.9f;
        break;
      case 2:
        s.sampling.temperature = 1.2f, s.sampling.top_k = 20, s.sampling.repetition_penalty = 1.3f;
        break;
      case 3:
        s.sampling.temperature = 0.7f, s.sampling.min_p = 0.05f;
        break;
      case 4:
        s.sampling.temperature = 1.0f;
        break;
    }
    if (i % 3 == 0) s.ignore_eos = true;
    if (i % 4 == 1) s.logprobs = 3;
    out.push_back(std::move(r));
  }
  return out;
}

void expect_same_as_alone(const Outcome& run, const std::vector<Request>& requests,
                          const std::map<std::string, Result>& alone, const std::string& what) {
  ASSERT_EQ(run.results.size(), requests.size()) << what;
  for (const Request& r : requests) {
    ASSERT_TRUE(run.results.contains(r.id)) << what << " " << r.id;
    EXPECT_EQ(run.results.at(r.id), alone.at(r.id)) << what << " " << r.id;
  }
  EXPECT_EQ(run.last.kv_blocks_used, 0) << what << ": blocks leaked";
  EXPECT_EQ(run.last.running + run.last.waiting, 0) << what;
}

class EngineTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    const Model& m = synthetic_llama3();
    requests_ = new std::vector<Request>(mixed_requests(*m.tokenizer));
    alone_ = new std::map<std::string, Result>;
    for (size_t i = 0; i < requests_->size(); ++i) {
      Request& r = (*requests_)[i];
      Result alone = run_alone(m.model.store, &*m.tokenizer, m.eos, r, kContext);
      // Random weights write random text: stop strings are taken from what a request wrote
      // alone, so they do match, and the reference is run again with them.
      if (i % 6 == 2 && alone.text.size() >= 6) {
        r.settings.stop = {alone.text.substr(alone.text.size() / 2, 2), "never written"};
        alone = run_alone(m.model.store, &*m.tokenizer, m.eos, r, kContext);
      }
      (*alone_)[r.id] = std::move(alone);
    }
  }
  static void TearDownTestSuite() {
    delete requests_;
    delete alone_;
  }

  static Outcome together(const EngineOptions& options, KvPoolShape pool) {
    const Model& m = synthetic_llama3();
    CpuBackend backend(m.model.store, kContext, pool);
    Engine engine(backend, options, &*m.tokenizer, m.eos);
    return run_together(engine, *requests_);
  }

  // A pool with room for every request at full length.
  static KvPoolShape roomy(int block) { return {block, (20 * kContext + block - 1) / block}; }

  static constexpr int kContext = 128;
  static std::vector<Request>* requests_;
  static std::map<std::string, Result>* alone_;
};
std::vector<Request>* EngineTest::requests_ = nullptr;
std::map<std::string, Result>* EngineTest::alone_ = nullptr;

TEST_F(EngineTest, AloneRunsCoverEveryFinishAndOption) {
  // The comparison below means something only if the requests differ in what they exercise.
  std::set<std::string> reasons;
  bool any_top = false;
  for (const auto& [id, r] : *alone_) {
    reasons.insert(r.reason);
    EXPECT_GT(r.tokens.size(), 0u) << id;
    for (const auto& top : r.top) any_top |= top.size() == 3;
  }
  EXPECT_TRUE(reasons.contains("length"));
  EXPECT_TRUE(reasons.contains("stop"));
  EXPECT_TRUE(any_top);
}

TEST_F(EngineTest, ConcurrentRequestsMatchEachAlone) {
  // Without prefix caching, which would hold back a repeated prompt a step to compute it once.
  EngineOptions options;
  options.prefix_cache = false;
  const Outcome run = together(options, roomy(16));
  expect_same_as_alone(run, *requests_, *alone_, "together");
  EXPECT_EQ(run.max_batch, int(requests_->size()));  // all in one forward at once
}

TEST_F(EngineTest, TokenBudgetAndBlockSizeDoNotChangeTokens) {
  for (auto [budget, block] : {std::pair{7, 16}, {64, 5}, {2048, 1}, {13, 3}}) {
    EngineOptions options;
    options.max_batch_tokens = budget;
    const Outcome run = together(options, roomy(block));
    expect_same_as_alone(run, *requests_, *alone_,
                         "budget " + std::to_string(budget) + " block " + std::to_string(block));
  }
}

// Prompt chunks cut to the decode-step budget beside decodes: the same tokens as alone.
TEST_F(EngineTest, DecodeStepBudgetDoesNotChangeTokens) {
  for (auto [budget, decode_step] : {std::pair{64, 1}, {64, 9}, {2048, 17}}) {
    EngineOptions options;
    options.max_batch_tokens = budget;
    options.decode_step_tokens = decode_step;
    const Outcome run = together(options, roomy(16));
    expect_same_as_alone(
        run, *requests_, *alone_,
        "budget " + std::to_string(budget) + " decode step " + std::to_string(decode_step));
  }
}

TEST_F(EngineTest, MaxRunningBoundsTheBatchAndOthersWait) {
  EngineOptions options;
  options.max_running = 3;
  const Outcome run = together(options, roomy(16));
  expect_same_as_alone(run, *requests_, *alone_, "max_running 3");
  EXPECT_EQ(run.max_running, 3);
  EXPECT_EQ(run.max_batch, 3);
  EXPECT_GT(run.max_waiting, 0);
}

// A pool that holds two requests' worth: the rest wait in the queue and finish, none fails.
TEST_F(EngineTest, ASmallPoolMakesRequestsWaitAndFinish) {
  const Outcome run = together({}, {16, 2 * kContext / 16});
  expect_same_as_alone(run, *requests_, *alone_, "small pool");
  EXPECT_GT(run.max_waiting, 0);
  EXPECT_LT(run.max_running, int(requests_->size()));
}

// A pool smaller than what the running sequences grow into: decodes run out of blocks and
// preempt the newest sequences, which are recomputed later with the same tokens.
TEST_F(EngineTest, PreemptionGivesTheSameTokens) {
  for (int block : {4, 16}) {
    const Outcome run = together({}, {block, kContext / block});
    expect_same_as_alone(run, *requests_, *alone_, "tiny pool, block " + std::to_string(block));
    EXPECT_GT(run.last.preemptions, 0u) << "block " << block;
  }
}

TEST_F(EngineTest, RequestsSubmittedWhileOthersRunMatchAlone) {
  const Model& m = synthetic_llama3();
  CpuBackend backend(m.model.store, kContext, roomy(8));
  EngineOptions options;
  options.max_batch_tokens = 16;
  Engine engine(backend, options, &*m.tokenizer, m.eos);
  std::map<std::string, Result> results;
  size_t next = 0;
  for (int step = 0; engine.has_work() || next < requests_->size(); ++step) {
    if (step % 3 == 0 && next < requests_->size()) engine.submit((*requests_)[next++]);
    for (const RequestOutput& out : engine.step()) results[out.id].add(out);
  }
  for (const Request& r : *requests_) EXPECT_EQ(results[r.id], alone_->at(r.id)) << r.id;
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, CancellationFreesBlocksAtOnce) {
  const Model& m = synthetic_llama3();
  CpuBackend backend(m.model.store, kContext, roomy(16));
  EngineOptions options;
  options.max_running = 12;  // the last eight wait
  Engine engine(backend, options, &*m.tokenizer, m.eos);
  for (const Request& r : *requests_) engine.submit(r);
  std::map<std::string, Result> results;
  for (int i = 0; i < 3; ++i)
    for (const RequestOutput& out : engine.step()) results[out.id].add(out);

  const int used = engine.stats().kv_blocks_used;
  ASSERT_GT(used, 0);
  EXPECT_TRUE(engine.cancel("r0"));   // running
  EXPECT_TRUE(engine.cancel("r19"));  // waiting
  EXPECT_FALSE(engine.cancel("r19"));
  EXPECT_FALSE(engine.cancel("nobody"));
  EXPECT_LT(engine.stats().kv_blocks_used, used);  // freed before any further step

  const std::vector<RequestOutput> next = engine.step();
  ASSERT_GE(next.size(), 2u);  // the cancellations come first
  EXPECT_EQ(next[0].id, "r0");
  EXPECT_EQ(next[1].id, "r19");
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(next[i].finish);
    EXPECT_EQ(next[i].finish->reason, FinishReason::Cancelled);
    EXPECT_TRUE(next[i].tokens.empty());
  }
  EXPECT_EQ(next[1].finish->generated_tokens, 0);
  for (const RequestOutput& out : next) results[out.id].add(out);

  // Cancel everything still live: the pool is empty at once.
  for (const Request& r : *requests_)
    if (results[r.id].reason.empty()) engine.cancel(r.id);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
  EXPECT_EQ(engine.stats().running + engine.stats().waiting, 0);
  while (engine.has_work()) engine.step();
  EXPECT_FALSE(engine.has_work());
}

// A held request is not scheduled but keeps its KV; the others pass it (held waiting ones
// included, max_running lets only some run), and once let go it writes exactly its tokens.
TEST_F(EngineTest, HeldRequestsWaitKeepTheirBlocksAndGiveTheSameTokens) {
  const Model& m = synthetic_llama3();
  CpuBackend backend(m.model.store, kContext, roomy(16));
  EngineOptions options;
  options.max_running = 12;  // the last eight wait
  Engine engine(backend, options, &*m.tokenizer, m.eos);
  for (const Request& r : *requests_) engine.submit(r);
  std::map<std::string, Result> results;
  for (const RequestOutput& out : engine.step()) results[out.id].add(out);
  const std::vector<std::string> held = {"r0", "r3", "r12", "r19"};  // running and waiting
  for (const std::string& id : held) EXPECT_TRUE(engine.hold(id, true)) << id;
  EXPECT_FALSE(engine.hold("nobody", true));
  EXPECT_EQ(engine.stats().held, 4);
  const size_t r0_tokens = results["r0"].tokens.size();
  // Everyone else finishes while the held ones wait; r0 keeps its blocks all along.
  while (engine.can_step()) {
    for (const RequestOutput& out : engine.step()) {
      EXPECT_EQ(std::count(held.begin(), held.end(), out.id), 0) << out.id << " ran while held";
      results[out.id].add(out);
    }
    EXPECT_GT(engine.stats().kv_blocks_used, 0);
  }
  EXPECT_TRUE(engine.has_work());
  EXPECT_EQ(results["r0"].tokens.size(), r0_tokens);
  for (const Request& r : *requests_) {
    if (std::count(held.begin(), held.end(), r.id) == 0) {
      EXPECT_EQ(results[r.id], alone_->at(r.id)) << r.id;
    }
  }
  for (const std::string& id : held) EXPECT_TRUE(engine.hold(id, false)) << id;
  EXPECT_EQ(engine.stats().held, 0);
  while (engine.has_work())
    for (const RequestOutput& out : engine.step()) results[out.id].add(out);
  for (const std::string& id : held) EXPECT_EQ(results[id], alone_->at(id)) << id;
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, BadRequestsAreRefusedByFieldAndOthersFinish) {
  const Model& m = synthetic_llama3();
  CpuBackend backend(m.model.store, kContext, {16, 4});  // 64 positions
  Engine engine(backend, {}, &*m.tokenizer, m.eos);
  const Request good = (*requests_)[0];
  struct Case {
    Request request;
    std::string field, message;
  };
  auto with = [&](std::string id, auto change) {
    Request r = good;
    r.id = std::move(id);
    change(r);
    return r;
  };
  const Case cases[] = {
      {with("dup", [](Request&) {}), "id", "still running"},
      {with("empty", [](Request& r) { r.prompt.clear(); }), "prompt", "empty"},
      {with("vocab", [](Request& r) { r.prompt.push_back(4096); }), "prompt", "vocabulary"},
      {with("negative", [](Request& r) { r.prompt[0] = -1; }), "prompt", "vocabulary"},
      // The settings' ranges (request_settings_test.cc has every edge): one, to show that
      // submit checks them and names the request.
      {with("nan", [](Request& r) { r.settings.sampling.min_p = NAN; }), "min_p",
       "must be in [0, 1], got nan"},
      {with("long", [](Request& r) { r.prompt.assign(129, 5); }), "prompt", "context length 128"},
      {with("context", [](Request& r) { r.settings.max_tokens = 127; }), "max_tokens",
       "exceed the context length 128"},
      {with("pool", [](Request& r) { r.settings.max_tokens = 100; }), "max_tokens",
       "more than the whole pool (4 blocks of 16 tokens)"},
  };
  Request first = good;
  first.id = "dup";
  first.settings.max_tokens = 5;
  engine.submit(first);
  for (const Case& c : cases) {
    try {
      engine.submit(c.request);
      ADD_FAILURE() << c.request.id << " was accepted";
    } catch (const RequestError& e) {
      EXPECT_EQ(e.request_id(), c.request.id);
      EXPECT_EQ(e.field(), c.field) << e.what();
      EXPECT_NE(std::string(e.what()).find("request '" + c.request.id + "': " + c.field + ": "),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
  }
  Request other = good;
  other.id = "other";
  other.settings.max_tokens = 5;
  engine.submit(other);
  std::map<std::string, Result> results;
  while (engine.has_work())
    for (const RequestOutput& out : engine.step()) results[out.id].add(out);
  EXPECT_EQ(results.size(), 2u);
  EXPECT_EQ(results["dup"].generated, 5);
  EXPECT_EQ(results["other"], results["dup"]);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

TEST(Engine, ZeroMaxTokensFinishesAtOnceWithLength) {
  const Model& m = synthetic_llama3();
  CpuBackend backend(m.model.store, 64);
  Engine engine(backend, {}, &*m.tokenizer, m.eos);
  RequestSettings settings;
  settings.max_tokens = 0;
  engine.submit({"zero", {0, 5, 6}, settings});
  const std::vector<RequestOutput> out = engine.step();
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].finish);
  EXPECT_EQ(out[0].finish->reason, FinishReason::Length);
  EXPECT_EQ(out[0].finish->prompt_tokens, 3);
  EXPECT_EQ(out[0].finish->generated_tokens, 0);
  EXPECT_FALSE(engine.has_work());
  EXPECT_EQ(engine.stats().steps, 0u);  // nothing ran
}

// A checkpoint whose final norm is NaN makes every logit NaN (engine_outcomes.h says what the
// requests come to).
TEST(Engine, NonFiniteLogitsEndTheRequestsWithAnErrorSayingSo) {
  const fs::path dir = test::synth_dir("engine_nan_norm", test::synth_options("tiny-llama3"));
  test::poison_with_nan(dir, "model.norm.weight");
  CpuBackend backend(std::make_shared<HostStore>(std::make_shared<HfModel>(HfModel::open(dir))),
                     64);
  test::expect_non_finite_logits_end_the_requests(backend);
}

// The default model's real text: eos and stop strings as a user sees them, sixteen requests
// batched against each alone.
TEST(Engine, DefaultModelRequestsTogetherMatchAlone) {
  const Model& m = default_model();
  const int context = 128;
  std::vector<Request> requests = mixed_requests(*m.tokenizer);
  requests.resize(16);
  std::map<std::string, Result> alone;
  std::set<std::string> reasons;
  for (size_t i = 0; i < requests.size(); ++i) {
    Request& r = requests[i];
    r.settings.max_tokens = 4 + int(i) % 8;
    if (i % 3 == 1) r.settings.stop = {" the", "."};
    alone[r.id] = run_alone(m.model.store, &*m.tokenizer, m.eos, r, context);
    reasons.insert(alone[r.id].reason);
  }
  EXPECT_TRUE(reasons.contains("stop"));
  CpuBackend backend(m.model.store, context, {16, 16 * context / 16});
  EngineOptions options;
  options.max_batch_tokens = 32;  // prompts chunked beside decodes
  Engine engine(backend, options, &*m.tokenizer, m.eos);
  expect_same_as_alone(run_together(engine, requests), requests, alone, "default model");
}

// A second architecture, token ids only, with long prompts chunked over many steps beside
// decodes: the same bits as alone.
TEST(Engine, SyntheticQwen3ChunkedPrefillBesideDecodes) {
  auto store = synthetic_qwen3();
  const int context = 256;
  std::vector<Request> requests;
  for (int i = 0; i < 17; ++i) {
    Request r;
    r.id = "q" + std::to_string(i);
    for (int t = 0; t < 3 + (i * 37) % 150; ++t) r.prompt.push_back(int32_t((t * 31 + i) % 500));
    r.settings.max_tokens = 4 + i % 9;
    r.settings.ignore_eos = true;
    r.settings.sampling.temperature = i % 2 ? 0.9f : 0.0f;
    r.settings.sampling.seed = uint64_t(i);
    r.settings.logprobs = i % 3;
    requests.push_back(std::move(r));
  }
  std::map<std::string, Result> alone;
  for (const Request& r : requests) alone[r.id] = run_alone(store, nullptr, {}, r, context);
  for (int budget : {13, 100}) {
    CpuBackend backend(store, context, {16, 17 * context / 16});
    EngineOptions options;
    options.max_batch_tokens = budget;
    Engine engine(backend, options, nullptr, {});
    expect_same_as_alone(run_together(engine, requests), requests, alone,
                         "qwen3 budget " + std::to_string(budget));
  }
}

}  // namespace
}  // namespace hearth
