// Structured output on the GPU: the mask kernel against the CPU reference (apply_token_mask)
// on fresh random logits and masks, and the default model on the batched CUDA engine: outputs
// inside their grammar, batched == alone, and the single-sequence engine refusing by name.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "kernels/cuda_check.h"
#include "kernels/token_mask.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/paths.h"
#include "tokenizer/tokenizer.h"
#include "worker/engine/backend_factory.h"
#include "worker/engine/engine.h"
#include "worker/engine/generator.h"
#include "worker/engine/structured/grammar.h"
#include "worker/worker_model.h"

namespace hearth {
namespace {

TEST(CudaTokenMask, KernelEqualsTheCpuReference) {
  HEARTH_REQUIRE_GPU();
  std::mt19937& rng = test::rng();
  for (int vocab : {1, 31, 33, 1000, 4096, 128256}) {
    const int rows = 7;
    const size_t words = (size_t(vocab) + 31) / 32;
    std::vector<float> logits = test::random_floats(size_t(rows) * vocab, 4.0f);
    // Rows 1, 4 and 5 are masked (4 allowing nothing, 5 everything), the others untouched.
    const std::vector<int32_t> masked = {4, 1, 5};
    std::vector<uint32_t> masks(masked.size() * words);
    for (size_t i = 0; i < masked.size(); ++i)
      for (size_t w = 0; w < words; ++w)
        masks[i * words + w] = masked[i] == 4 ? 0u : masked[i] == 5 ? ~0u : uint32_t(rng());
    DeviceBuffer d_logits = test::upload(logits), d_rows = test::upload(masked),
                 d_masks = test::upload(masks);
    kernels::apply_token_masks(d_logits.get<float>(), vocab, d_rows.get<int32_t>(),
                               d_masks.get<uint32_t>(), int(masked.size()), nullptr);
    std::vector<float> got(logits.size());
    HEARTH_CUDA_CHECK(
        cudaMemcpy(got.data(), d_logits.get(), got.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<float> want = logits;
    for (size_t i = 0; i < masked.size(); ++i)
      apply_token_mask(std::span<float>(want).subspan(size_t(masked[i]) * vocab, size_t(vocab)),
                       std::span<const uint32_t>(masks).subspan(i * words, words));
    for (size_t k = 0; k < want.size(); ++k)
      ASSERT_EQ(got[k], want[k]) << "vocab " << vocab << " index " << k;
  }
}

struct DefaultModel {
  DefaultModel()
      : model(open_model_dir(test::source_dir() / "models/hearth-tiny-fortunes")),
        tokenizer(Tokenizer::from_json(model.tokenizer_json)),
        eos(end_of_sequence_ids(model, &tokenizer)) {}
  WorkerModel model;
  Tokenizer tokenizer;
  std::vector<int32_t> eos;
};

EngineOptions cuda_options(CudaEngineKind kind) {
  EngineOptions o;
  o.backend = BackendKind::Cuda;
  o.cuda_engine = kind;
  o.kv_pool_tokens = 8192;
  return o;
}

const std::vector<StructuredOutput>& formats() {
  static const std::vector<StructuredOutput> f = {
      {OutputFormat::JsonSchema,
       R"({"type":"object","properties":{"fortune":{"type":"string","maxLength":30},
       "lucky":{"type":"integer","minimum":1,"maximum":99}},"required":["fortune","lucky"]})"},
      {OutputFormat::JsonObject, ""},
      {},
      {OutputFormat::Regex, "(yes|no), [a-z ]{3,20}\\."}};
  return f;
}

TEST(CudaStructuredGeneration, BatchedEqualsAloneAndStaysInTheGrammar) {
  HEARTH_REQUIRE_GPU();
  const DefaultModel m;
  const EngineOptions o = cuda_options(CudaEngineKind::Batched);
  auto backend = make_backend(o, m.model.weights());
  auto request = [&](size_t i, uint64_t seed) {
    Request r{
        std::to_string(i) + "/" + std::to_string(seed), m.tokenizer.encode("Never", true), {}};
    r.settings.sampling.temperature = 0.9f;
    r.settings.sampling.seed = seed;
    r.settings.max_tokens = 80;
    r.settings.structured = formats()[i];
    return r;
  };
  Engine engine(*backend, o, &m.tokenizer, m.eos);
  for (uint64_t seed = 1; seed <= 4; ++seed)
    for (size_t i = 0; i < formats().size(); ++i) engine.submit(request(i, seed));
  std::map<std::string, std::vector<int32_t>> batched;
  std::map<std::string, std::string> text;
  std::map<std::string, FinishReason> reason;
  while (engine.has_work())
    for (const RequestOutput& out : engine.step()) {
      for (const TokenOutput& t : out.tokens)
        batched[out.id].push_back(t.token), text[out.id] += t.visible;
      if (out.finish) {
        ASSERT_NE(out.finish->reason, FinishReason::Error) << out.finish->error;
        reason[out.id] = out.finish->reason;
        text[out.id] += out.finish->final_visible;
      }
    }
  for (uint64_t seed = 1; seed <= 4; ++seed)
    for (size_t i = 0; i < formats().size(); ++i) {
      const Request r = request(i, seed);
      if (formats()[i].format != OutputFormat::Text) {
        const structured::ByteDfa dfa = structured::ByteDfa::compile(
            structured::structured_language(formats()[i]), structured::kMaxGrammarStates);
        if (reason[r.id] == FinishReason::Eos)
          EXPECT_TRUE(dfa.matches(text[r.id])) << text[r.id];
        else
          EXPECT_NE(dfa.walk(0, text[r.id]), structured::ByteDfa::kDead) << text[r.id];
      }
      GenerationRequest alone{r.prompt, r.settings, m.eos};
      auto alone_backend = make_backend(o, m.model.weights());
      std::vector<int32_t> tokens;
      for (const TokenOutput& t : generate(*alone_backend, &m.tokenizer, alone, {}, o).tokens)
        tokens.push_back(t.token);
      EXPECT_EQ(batched[r.id], tokens) << r.id;
    }
}

TEST(CudaStructuredGeneration, TheSingleSequenceEngineRefusesByName) {
  HEARTH_REQUIRE_GPU();
  const DefaultModel m;
  const EngineOptions o = cuda_options(CudaEngineKind::Single);
  auto backend = make_backend(o, m.model.weights());
  Engine engine(*backend, o, &m.tokenizer, m.eos);
  Request r{"x", m.tokenizer.encode("Never", true), {}};
  r.settings.structured = {OutputFormat::JsonObject, ""};
  try {
    engine.submit(r);
    FAIL();
  } catch (const RequestError& e) {
    EXPECT_EQ(e.field(), "guided_json");
  }
}

}  // namespace
}  // namespace hearth
