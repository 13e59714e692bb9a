// ServeLoop without sockets, on a real engine (CPU backend, a synthetic Llama 3): clients'
// requests run under their own ids, refusals name the field, a held client's requests wait
// until let go, cancel and disconnect end requests, stop fails what is in flight and drains,
// and a loop with nothing to do goes idle. The sink here only records what the loop says; the
// tests wait on what it recorded, never on a clock.
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>

#include "tests/support/temp_dir.h"
#include "tools/synth_model.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/model/host_store.h"
#include "worker/engine/cpu_backend.h"
#include "worker/serve_loop.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using json = nlohmann::json;

constexpr int kContext = 64;

std::shared_ptr<const WeightStore> synthetic_llama3() {
  static std::shared_ptr<const WeightStore> store = [] {
    const fs::path dir = test::process_scratch_dir() / "serve_loop_test";
    fs::remove_all(dir);
    SynthOptions opt;
    opt.preset = "tiny-llama3";
    write_synthetic_model(dir, opt);
    return std::make_shared<HostStore>(std::make_shared<HfModel>(HfModel::open(dir)));
  }();
  return store;
}

// What the loop said, in order, for the test thread to wait on.
class Recorder final : public ServeLoop::Sink {
 public:
  struct Said {
    ServeLoop::ClientId client;
    ServeLoop::ReplyTo reply_to;
    json result;          // answer
    std::string refusal;  // refuse
  };

  void answer(ServeLoop::ClientId client, ServeLoop::ReplyTo reply_to, json result) override {
    record([&] { answers_.push_back({client, reply_to, std::move(result), {}}); });
  }
  void refuse(ServeLoop::ClientId client, ServeLoop::ReplyTo reply_to,
              std::string message) override {
    record([&] { answers_.push_back({client, reply_to, nullptr, std::move(message)}); });
  }
  void deliver(std::vector<ServeLoop::ClientOutput> outputs) override {
    record([&] {
      for (ServeLoop::ClientOutput& out : outputs) {
        RequestOutput& mine = outputs_[{out.client, out.output.id}];
        mine.id = out.output.id;
        for (TokenOutput& t : out.output.tokens) mine.tokens.push_back(std::move(t));
        if (out.output.finish) mine.finish = out.output.finish;
      }
    });
  }
  void idle() override {
    record([&] { idle_ = true; });
  }
  void drain() override {
    record([&] { drained_ = true; });
  }
  void stop_now() override {
    record([&] { stopped_now_ = true; });
  }

  // Waits (up to a minute) until `ready` holds (called under the lock).
  template <class Ready>
  bool wait(Ready ready) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, 60s, [&] { return ready(); });
  }
  // The answer to `reply_to` of `client`, once there is one.
  Said said(ServeLoop::ClientId client, ServeLoop::ReplyTo reply_to) {
    Said out{};
    const bool found = wait([&] {
      for (const Said& s : answers_)
        if (s.client == client && s.reply_to == reply_to) {
          out = s;
          return true;
        }
      return false;
    });
    EXPECT_TRUE(found) << "no answer to " << client << "/" << reply_to;
    return out;
  }
  // A request's outputs so far, once it has ended.
  RequestOutput ended(ServeLoop::ClientId client, const std::string& id) {
    RequestOutput out;
    const bool found = wait([&] {
      auto it = outputs_.find({client, id});
      if (it == outputs_.end() || !it->second.finish) return false;
      out = it->second;
      return true;
    });
    EXPECT_TRUE(found) << "request " << client << "/" << id << " never ended";
    return out;
  }
  bool has_output(ServeLoop::ClientId client, const std::string& id) {
    std::lock_guard lock(mutex_);
    return outputs_.contains({client, id});
  }
  bool went_idle() {
    return wait([&] { return idle_; });
  }
  bool drained() {
    return wait([&] { return drained_; });
  }
  bool stopped_now() {
    std::lock_guard lock(mutex_);
    return stopped_now_;
  }
  bool stopped_now_unlocked() const { return stopped_now_; }  // inside wait()

 private:
  template <class Fn>
  void record(Fn fn) {
    {
      std::lock_guard lock(mutex_);
      fn();
    }
    changed_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Said> answers_;
  std::map<std::pair<ServeLoop::ClientId, std::string>, RequestOutput> outputs_;
  bool idle_ = false, drained_ = false, stopped_now_ = false;
};

json request(const std::string& id, int max_tokens) {
  return {{"id", id},
          {"prompt_tokens", {1, 2, 3, 4}},
          {"max_tokens", max_tokens},
          {"ignore_eos", true},
          {"temperature", 0}};
}

class ServeLoopTest : public ::testing::Test {
 protected:
  ServeLoopTest() : backend_(synthetic_llama3(), kContext), engine_(backend_, {}, nullptr, {}) {}

  // The loop's stats once every round before this call has ended: the snapshot is taken at
  // the end of each round, and a command sent now is answered in a later round.
  EngineStats settled_stats(ServeLoop& loop) {
    loop.cancel(kBarrier, ++barriers_, "none");
    EXPECT_EQ(sink_.said(kBarrier, barriers_).result, json({{"cancelled", false}}));
    return loop.stats();
  }

  static constexpr ServeLoop::ClientId kBarrier = 999;
  ServeLoop::ReplyTo barriers_ = 0;
  CpuBackend backend_;
  Engine engine_;
  Recorder sink_;
};

TEST_F(ServeLoopTest, ClientsMayShareAnIdAndEachGetsItsOwnRequest) {
  ServeLoop loop(engine_, {}, nullptr, {}, sink_);
  loop.submit(1, 10, request("r1", 5));
  loop.submit(2, 10, request("r1", 3));
  EXPECT_EQ(sink_.said(1, 10).result, json({{"request_id", "r1"}}));
  EXPECT_EQ(sink_.said(2, 10).result, json({{"request_id", "r1"}}));
  const RequestOutput one = sink_.ended(1, "r1"), two = sink_.ended(2, "r1");
  EXPECT_EQ(one.tokens.size(), 5u);
  EXPECT_EQ(two.tokens.size(), 3u);
  EXPECT_EQ(one.finish->reason, FinishReason::Length);
  // The same prompt, greedy: the shorter one is the longer one's start.
  for (size_t i = 0; i < two.tokens.size(); ++i)
    EXPECT_EQ(one.tokens[i].token, two.tokens[i].token) << i;
  EXPECT_EQ(settled_stats(loop).finished, 2u);
}

TEST_F(ServeLoopTest, RefusalsNameTheRequestAndField) {
  ServeLoop loop(engine_, {}, nullptr, {}, sink_);
  loop.submit(1, 1, request("long", kContext * 2));             // the engine's check
  loop.submit(1, 2, {{"id", "bad"}, {"prompt_tokens", "no"}});  // the reader's check
  const Recorder::Said too_long = sink_.said(1, 1), unreadable = sink_.said(1, 2);
  EXPECT_NE(too_long.refusal.find("request 'long': max_tokens"), std::string::npos)
      << too_long.refusal;
  EXPECT_NE(unreadable.refusal.find("prompt_tokens"), std::string::npos) << unreadable.refusal;
  EXPECT_FALSE(sink_.has_output(1, "long"));
  EXPECT_FALSE(sink_.has_output(1, "bad"));
}

TEST_F(ServeLoopTest, AHeldClientsRequestsWaitUntilLetGo) {
  ServeLoop loop(engine_, {}, nullptr, {}, sink_);
  loop.hold(1, true);
  loop.submit(1, 1, request("r1", 4));
  EXPECT_EQ(sink_.said(1, 1).result, json({{"request_id", "r1"}}));
  EXPECT_EQ(settled_stats(loop).held, 1);
  // Another client's request runs to its end meanwhile; the held one, from its submit on,
  // is never scheduled.
  loop.submit(2, 1, request("r2", 2));
  EXPECT_EQ(sink_.ended(2, "r2").tokens.size(), 2u);
  EXPECT_FALSE(sink_.has_output(1, "r1"));
  loop.hold(1, false);
  EXPECT_EQ(sink_.ended(1, "r1").tokens.size(), 4u);
}

TEST_F(ServeLoopTest, CancelEndsAClientsRequestByItsOwnId) {
  ServeLoop loop(engine_, {}, nullptr, {}, sink_);
  loop.hold(1, true);
  loop.submit(1, 1, request("r1", 4));
  sink_.said(1, 1);
  loop.cancel(2, 1, "r1");  // another client's id space: not found
  EXPECT_EQ(sink_.said(2, 1).result, json({{"cancelled", false}}));
  loop.cancel(1, 2, "r1");
  EXPECT_EQ(sink_.said(1, 2).result, json({{"cancelled", true}}));
  EXPECT_EQ(sink_.ended(1, "r1").finish->reason, FinishReason::Cancelled);
}

TEST_F(ServeLoopTest, AClientGoneHasItsRequestsCancelled) {
  ServeLoop loop(engine_, {}, nullptr, {}, sink_);
  loop.hold(1, true);
  loop.submit(1, 1, request("r1", 4));
  sink_.said(1, 1);
  loop.disconnect(1);
  EXPECT_EQ(sink_.ended(1, "r1").finish->reason, FinishReason::Cancelled);
  EXPECT_EQ(settled_stats(loop).cancelled, 1u);
}

TEST_F(ServeLoopTest, StopFailsWhatIsInFlightThenDrains) {
  ServeLoop::Options options;
  options.shutdown_grace = 1h;  // never over here: finish() ends the wait
  ServeLoop loop(engine_, {}, nullptr, options, sink_);
  loop.hold(1, true);
  loop.submit(1, 1, request("r1", 4));
  sink_.said(1, 1);
  loop.stop("SIGTERM");
  const RequestOutput out = sink_.ended(1, "r1");
  EXPECT_EQ(out.finish->reason, FinishReason::Error);
  EXPECT_EQ(out.finish->error, "the worker is shutting down (SIGTERM)");
  EXPECT_TRUE(sink_.drained());
  EXPECT_FALSE(sink_.stopped_now());  // the grace is not over: the loop waits for finish()
}

TEST_F(ServeLoopTest, ADrainPastItsGraceStopsAnyway) {
  ServeLoop::Options options;
  options.shutdown_grace = 0ms;
  ServeLoop loop(engine_, {}, nullptr, options, sink_);
  loop.stop("SIGINT");
  EXPECT_TRUE(sink_.drained());
  EXPECT_TRUE(sink_.wait([&] { return sink_.stopped_now_unlocked(); }));
}

TEST_F(ServeLoopTest, NothingInFlightGoesIdle) {
  ServeLoop::Options options;
  options.idle_exit = 1ms;
  ServeLoop loop(engine_, {}, nullptr, options, sink_);
  EXPECT_TRUE(sink_.went_idle());
}

}  // namespace
}  // namespace hearth
