// How a batched proof run splits profiles into request settings and engine options, and how
// many workers it needs.
#include "proof/batched_plan.h"

#include <gtest/gtest.h>

#include "worker/engine/profile.h"

namespace hearth::proof {
namespace {

using json = nlohmann::json;

ProofProfile profile(const std::string& label, const std::string& text) {
  ProofProfile p;
  p.label = label;
  p.settings = profile_to_json(parse_profile(text, label));
  return p;
}

TEST(BatchedPlan, SplitsAProfileByTheWorkersRules) {
  const ProfileParts parts = split_profile(
      profile("p", R"({"name": "p", "temperature": 0.5, "seed": 9, "max_running": 4})").settings);
  EXPECT_EQ(parts.request["temperature"], 0.5);
  EXPECT_EQ(parts.request["seed"], 9);
  EXPECT_TRUE(parts.request.contains("max_tokens"));
  EXPECT_TRUE(parts.request.contains("stop"));
  EXPECT_EQ(parts.engine["max_running"], 4);
  EXPECT_TRUE(parts.engine.contains("backend"));
  EXPECT_FALSE(parts.engine.contains("temperature"));
  EXPECT_FALSE(parts.request.contains("backend"));
  EXPECT_FALSE(parts.request.contains("name"));
  EXPECT_FALSE(parts.engine.contains("name"));
  // Every key lands on exactly one side.
  EXPECT_EQ(parts.request.size() + parts.engine.size() + 1, profile("q", "{}").settings.size());
  // What a request carries, a worker takes as a request.
  RequestSettings r;
  EXPECT_NO_THROW(apply_request_json(r, parts.request, "request"));
  EXPECT_EQ(r.sampling.seed, 9u);
}

TEST(BatchedPlan, ProfilesShareAWorkerExactlyWhenTheirEngineOptionsAgree) {
  const std::vector<ProofProfile> profiles = {
      profile("greedy", R"({"temperature": 0})"),
      profile("narrow", R"({"temperature": 0, "max_running": 2})"),
      profile("sampled", R"({"temperature": 1, "seed": 3, "top_k": 5})"),
      profile("narrow-sampled", R"({"temperature": 1, "max_running": 2})"),
      profile("chunked", R"({"max_batch_tokens": 7})")};
  const std::vector<BatchedWorker> workers = plan_batched_workers(profiles);
  ASSERT_EQ(workers.size(), 3u);
  EXPECT_EQ(workers[0].profiles, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(workers[1].profiles, (std::vector<size_t>{1, 3}));
  EXPECT_EQ(workers[2].profiles, (std::vector<size_t>{4}));
  EXPECT_EQ(workers[1].engine_options["max_running"], 2);
  EXPECT_EQ(engine_option_differences(workers[0].engine_options, workers[1].engine_options),
            "max_running 256 -> 2");
  EXPECT_EQ(engine_option_differences(workers[0].engine_options, workers[0].engine_options), "");
  const json recorded = batched_workers_json(workers, profiles);
  EXPECT_EQ(recorded[0]["profiles"], json({"greedy", "sampled"}));
  EXPECT_EQ(recorded[2]["engine_options"]["max_batch_tokens"], 7);
}

}  // namespace
}  // namespace hearth::proof
