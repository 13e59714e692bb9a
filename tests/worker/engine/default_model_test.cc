// The embedded default model (models/hearth-tiny-fortunes) keeps writing what it wrote when it
// was trained: greedy continuations of the card's prompts, as transformers produced them and
// stored in training_metrics.json, must come out of hearth's tokenizer + CPU engine unchanged.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/paths.h"
#include "weight-server/model/hf_model.h"
#include "worker/engine/backend_factory.h"
#include "worker/engine/profile.h"
#include "worker/engine/generator.h"
#include "tokenizer/tokenizer.h"
#include "worker/worker_model.h"
#include "base/read_file.h"

namespace hearth {
namespace {

using json = nlohmann::json;

TEST(DefaultModel, GreedyContinuationsAreStable) {
  const auto dir = test::source_dir() / "models/hearth-tiny-fortunes";
  const json metrics = json::parse(read_file(dir / "training_metrics.json"));
  WorkerModel model = open_model_dir(dir);
  const Tokenizer tokenizer = Tokenizer::from_json(model.tokenizer_json);
  int checked = 0;
  for (const json& sample : metrics["samples"]) {
    if (sample["mode"] != "greedy") continue;
    Profile profile;
    profile.engine.backend = BackendKind::Cpu;
    profile.request.sampling.temperature = 0;
    profile.request.max_tokens = sample["max_new_tokens"].get<int>();
    GenerationRequest request;
    request.settings = profile.request;
    request.prompt =
        tokenizer.encode(sample["prompt"].get<std::string>(), /*add_special_tokens=*/true);
    EXPECT_EQ(request.prompt, sample["prompt_ids"].get<std::vector<int32_t>>()) << sample["prompt"];
    request.eos_ids = end_of_sequence_ids(model, &tokenizer);
    auto backend = make_backend(profile.engine, model.weights());
    const Generation out = generate(*backend, &tokenizer, request);
    std::vector<int32_t> tokens;
    std::string text;
    for (const TokenOutput& t : out.tokens) {
      tokens.push_back(t.token);
      text += t.visible;
    }
    text += out.finish.final_visible;
    EXPECT_EQ(tokens, sample["output_ids"].get<std::vector<int32_t>>()) << sample["prompt"];
    EXPECT_EQ(text, sample["completion"].get<std::string>()) << sample["prompt"];
    EXPECT_EQ(finish_reason_name(out.finish.reason), sample["stop"].get<std::string>())
        << sample["prompt"];
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

}  // namespace
}  // namespace hearth
