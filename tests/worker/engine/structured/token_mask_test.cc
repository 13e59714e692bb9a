// Token masks against brute force over the default model's vocabulary, and structured
// generation on the default model (CPU engine): every output inside its grammar, the same
// tokens alone and batched.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/support/paths.h"
#include "tokenizer/tokenizer.h"
#include "worker/engine/backend_factory.h"
#include "worker/engine/engine.h"
#include "worker/engine/generator.h"
#include "worker/engine/structured/grammar.h"
#include "worker/engine/structured/json_schema_language.h"
#include "worker/worker_model.h"

namespace hearth::structured {
namespace {

struct DefaultModel {
  DefaultModel()
      : model(open_model_dir(test::source_dir() / "models/hearth-tiny-fortunes")),
        tokenizer(Tokenizer::from_json(model.tokenizer_json)),
        eos(end_of_sequence_ids(model, &tokenizer)) {}
  std::shared_ptr<const Vocabulary> vocabulary() const {
    std::vector<std::string> bytes(tokenizer.vocab_size());
    for (size_t t = 0; t < bytes.size(); ++t) bytes[t] = tokenizer.token_bytes(int32_t(t));
    return std::make_shared<const Vocabulary>(std::move(bytes), eos);
  }
  WorkerModel model;
  Tokenizer tokenizer;
  std::vector<int32_t> eos;
};

const DefaultModel& default_model() {
  static const DefaultModel m;
  return m;
}

TEST(TokenBytes, DecodeBackToTheTokenizersText) {
  const Tokenizer& tok = default_model().tokenizer;
  const std::string text = "A computer {\"k\": [1, 2.5]} caf\xC3\xA9 \xE2\x82\xAC!";
  std::string joined;
  for (int32_t id : tok.encode(text, false)) joined += tok.token_bytes(id);
  EXPECT_EQ(joined, text);
  for (int32_t eos : default_model().eos) EXPECT_EQ(tok.token_bytes(eos), "");
}

// At every state a random walk through the grammar visits: token t is allowed exactly when
// its bytes keep the automaton alive, and an end token exactly when the text is complete.
TEST(TokenMask, EqualsBruteForceOverTheVocabulary) {
  const auto vocab = default_model().vocabulary();
  GrammarCache cache(vocab);
  std::mt19937 rng(11);
  for (const StructuredOutput& s :
       {StructuredOutput{OutputFormat::JsonSchema,
                         R"({"type":"object","properties":{"n":{"type":"integer","minimum":-20,
                         "maximum":300},"s":{"type":"string","maxLength":8},"t":{"enum":["yes",
                         "no"]}},"required":["n","t"]})"},
        StructuredOutput{OutputFormat::JsonObject, ""},
        StructuredOutput{OutputFormat::Regex, R"([A-Z][a-z]{2,6}( [a-z]+)*\.)"}}) {
    const std::shared_ptr<const Grammar> g = cache.get(s);
    for (int walk = 0; walk < 4; ++walk) {
      GrammarMatcher m(g);
      int32_t state = 0;
      for (int step = 0; step < 40; ++step) {
        const std::span<const uint32_t> mask = m.mask();
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < int32_t(vocab->bytes.size()); ++t) {
          bool expect;
          if (std::find(vocab->eos_ids.begin(), vocab->eos_ids.end(), t) != vocab->eos_ids.end())
            expect = g->dfa().accepting(state);
          else
            expect = !vocab->bytes[size_t(t)].empty() &&
                     g->dfa().walk(state, vocab->bytes[size_t(t)]) != ByteDfa::kDead;
          ASSERT_EQ(mask_allows(mask, t), expect) << s.spec << " token " << t << " step " << step;
          if (expect) allowed.push_back(t);
        }
        ASSERT_FALSE(allowed.empty());
        const int32_t pick = allowed[rng() % allowed.size()];
        ASSERT_TRUE(m.advance(pick));
        if (std::find(vocab->eos_ids.begin(), vocab->eos_ids.end(), pick) != vocab->eos_ids.end())
          break;
        state = g->dfa().walk(state, vocab->bytes[size_t(pick)]);
      }
    }
  }
  EXPECT_EQ(cache.compiled(), uint64_t{3});
  cache.get({OutputFormat::JsonObject, ""});
  EXPECT_EQ(cache.compiled(), uint64_t{3});  // from the cache
}

// A serving worker compiles on its request reader's thread while the engine's thread looks up
// (and may compile) the same spec: both get the one grammar the cache keeps, and a spec being
// compiled does not stop another from being found.
TEST(GrammarCache, ThreadsCompilingTheSameSpecShareOneGrammar) {
  GrammarCache cache(default_model().vocabulary());
  const StructuredOutput object{OutputFormat::JsonObject, ""};
  const StructuredOutput digits{OutputFormat::Regex, "[0-9]{1,6}"};
  std::shared_ptr<const Grammar> from_thread, from_here;
  std::thread reader([&] { from_thread = cache.get(object); });
  const auto small = cache.get(digits);
  from_here = cache.get(object);
  reader.join();
  ASSERT_NE(from_thread, nullptr);
  EXPECT_EQ(from_thread, from_here);  // one grammar, whichever thread inserted it
  EXPECT_EQ(cache.get(digits), small);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_LE(cache.compiled(), uint64_t{3});  // at most one duplicate compile, never kept
}

TEST(GrammarCache, KeepsAtMostItsBoundAndRefusesBadSpecs) {
  GrammarCache cache(default_model().vocabulary(), 2);
  for (int i = 0; i < 4; ++i) cache.get({OutputFormat::Regex, "a{" + std::to_string(i) + "}"});
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_THROW(cache.get({OutputFormat::JsonSchema, R"({"type":"string","format":"date"})"}),
               GrammarError);
  EXPECT_THROW(cache.get({OutputFormat::Regex, "(a"}), GrammarError);
}

Generation run(const StructuredOutput& s, uint64_t seed, int max_tokens = 120) {
  const DefaultModel& m = default_model();
  EngineOptions options;
  options.backend = BackendKind::Cpu;
  auto backend = make_backend(options, m.model.weights());
  GenerationRequest r;
  r.prompt = m.tokenizer.encode("A computer", true);
  r.settings.sampling.temperature = 1.0f;
  r.settings.sampling.seed = seed;
  r.settings.max_tokens = max_tokens;
  r.settings.structured = s;
  r.eos_ids = m.eos;
  return generate(*backend, &m.tokenizer, r, {}, options);
}

std::string text_of(const Generation& g) {
  std::string text;
  for (const TokenOutput& t : g.tokens) text += t.visible;
  return text + g.finish.final_visible;
}

TEST(StructuredGeneration, DefaultModelOutputsStayInTheirGrammar) {
  const std::string schema = R"({"type":"object","properties":{"fortune":{"type":"string",
      "maxLength":40},"lucky":{"type":"integer","minimum":1,"maximum":99},"mood":{"enum":
      ["good","bad"]}},"required":["fortune","lucky","mood"],"additionalProperties":false})";
  const ByteDfa dfa = ByteDfa::compile(json_schema_language(schema), kMaxGrammarStates);
  int complete = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const Generation g = run({OutputFormat::JsonSchema, schema}, seed, 200);
    const std::string text = text_of(g);
    ASSERT_NE(g.finish.reason, FinishReason::Error) << g.finish.error;
    if (g.finish.reason == FinishReason::Eos) {
      ++complete;
      EXPECT_TRUE(dfa.matches(text)) << text;
      const nlohmann::json j = nlohmann::json::parse(text);
      EXPECT_TRUE(j.at("lucky").get<int>() >= 1 && j.at("lucky").get<int>() <= 99) << text;
    } else {
      EXPECT_EQ(g.finish.reason, FinishReason::Length);
      EXPECT_NE(dfa.walk(0, text), ByteDfa::kDead) << text;  // a prefix of a valid text
    }
  }
  EXPECT_GT(complete, 0);
}

TEST(StructuredGeneration, RegexAndJsonObjectOutputsMatch) {
  const StructuredOutput re{OutputFormat::Regex, "(Yes|No)! [A-Z][a-z]{1,12} [0-9]{1,3}\\."};
  const ByteDfa re_dfa = ByteDfa::compile(structured_language(re), kMaxGrammarStates);
  const ByteDfa obj_dfa = ByteDfa::compile(json_object_language(), kMaxGrammarStates);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    const Generation g = run(re, seed);
    ASSERT_EQ(g.finish.reason, FinishReason::Eos) << text_of(g);
    EXPECT_TRUE(re_dfa.matches(text_of(g))) << text_of(g);
    const Generation o = run({OutputFormat::JsonObject, ""}, seed);
    ASSERT_NE(o.finish.reason, FinishReason::Error) << o.finish.error;
    if (o.finish.reason == FinishReason::Eos) {
      EXPECT_TRUE(obj_dfa.matches(text_of(o))) << text_of(o);
      EXPECT_TRUE(nlohmann::json::parse(text_of(o)).is_object()) << text_of(o);
    }
  }
}

// Structured and plain requests in one engine get the tokens each gets alone.
// guided_prefix / guided_suffix: literal text around the format (a forced tool call's markup),
// part of the cache key, refused without a format; generation starts with the prefix.
TEST(StructuredGeneration, PrefixAndSuffixWrapTheFormat) {
  const StructuredOutput wrapped{OutputFormat::Regex, "[0-9]{1,3}", "<n>", "</n>"};
  const ByteDfa dfa = ByteDfa::compile(structured_language(wrapped), kMaxGrammarStates);
  EXPECT_TRUE(dfa.matches("<n>42</n>"));
  EXPECT_FALSE(dfa.matches("42"));
  EXPECT_FALSE(dfa.matches("<n>42"));
  GrammarCache cache(default_model().vocabulary(), 4);
  cache.get(wrapped);
  cache.get({OutputFormat::Regex, "[0-9]{1,3}"});
  cache.get({OutputFormat::Regex, "[0-9]{1,3}", "<n", "></n>"});
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.compiled(), uint64_t{3});
  EXPECT_THROW(check_structured_output({OutputFormat::Text, "", "<n>", ""}), SettingError);
  for (uint64_t seed : {1u, 2u, 3u}) {
    const std::string text = text_of(run(wrapped, seed, 40));
    EXPECT_EQ(text.rfind("<n>", 0), 0u) << text;
    EXPECT_NE(dfa.walk(0, text), ByteDfa::kDead) << text;
  }
}

TEST(StructuredGeneration, BatchedEqualsAlone) {
  const DefaultModel& m = default_model();
  const std::vector<StructuredOutput> formats = {
      {OutputFormat::JsonObject, ""},
      {OutputFormat::Regex, "(yes|no|maybe), because [a-z ]{5,30}\\."},
      {},
      {OutputFormat::JsonSchema, R"({"type":"array","items":{"type":"boolean"},"maxItems":4})"}};
  EngineOptions options;
  options.backend = BackendKind::Cpu;
  auto backend = make_backend(options, m.model.weights());
  Engine engine(*backend, options, &m.tokenizer, m.eos);
  for (size_t i = 0; i < formats.size(); ++i) {
    Request r{std::to_string(i), m.tokenizer.encode("Never", true), {}};
    r.settings.sampling.temperature = 0.8f;
    r.settings.sampling.seed = 5 + i;
    r.settings.max_tokens = 60;
    r.settings.structured = formats[i];
    engine.submit(r);
  }
  std::map<std::string, std::vector<int32_t>> batched;
  while (engine.has_work())
    for (const RequestOutput& out : engine.step()) {
      for (const TokenOutput& t : out.tokens) batched[out.id].push_back(t.token);
      if (out.finish) {
        EXPECT_NE(out.finish->reason, FinishReason::Error) << out.finish->error;
      }
    }
  for (size_t i = 0; i < formats.size(); ++i) {
    GenerationRequest r;
    r.prompt = m.tokenizer.encode("Never", true);
    r.settings.sampling.temperature = 0.8f;
    r.settings.sampling.seed = 5 + i;
    r.settings.max_tokens = 60;
    r.settings.structured = formats[i];
    r.eos_ids = m.eos;
    auto alone_backend = make_backend(options, m.model.weights());
    std::vector<int32_t> alone;
    for (const TokenOutput& t : generate(*alone_backend, &m.tokenizer, r, {}, options).tokens)
      alone.push_back(t.token);
    EXPECT_EQ(batched[std::to_string(i)], alone) << i;
  }
}

// A complete text and no end token to end it with: the request fails saying so, rather than
// sampling a token outside the grammar.
TEST(StructuredGeneration, ACompleteTextWithoutAnEndTokenFailsSayingSo) {
  const DefaultModel& m = default_model();
  EngineOptions options;
  options.backend = BackendKind::Cpu;
  auto backend = make_backend(options, m.model.weights());
  GenerationRequest r;
  r.prompt = m.tokenizer.encode("Never", true);
  r.settings.max_tokens = 20;
  r.settings.structured = {OutputFormat::Regex, "ok"};
  const Generation g = generate(*backend, &m.tokenizer, r, {}, options);  // no eos_ids
  EXPECT_EQ(g.finish.reason, FinishReason::Error);
  EXPECT_NE(g.finish.error.find("end-of-sequence"), std::string::npos) << g.finish.error;
}

TEST(StructuredGeneration, BadSpecsAreRefusedAtSubmitNamingTheField) {
  const DefaultModel& m = default_model();
  EngineOptions options;
  options.backend = BackendKind::Cpu;
  auto backend = make_backend(options, m.model.weights());
  Engine engine(*backend, options, &m.tokenizer, m.eos);
  Request r{"bad", m.tokenizer.encode("Never", true), {}};
  r.settings.structured = {OutputFormat::JsonSchema, R"({"type":"string","pattern":"a+"})"};
  try {
    engine.submit(r);
    FAIL();
  } catch (const RequestError& e) {
    EXPECT_EQ(e.field(), "guided_json");
    EXPECT_NE(e.reason().find("'pattern'"), std::string::npos) << e.what();
  }
  Engine no_tokenizer(*backend, options, nullptr, m.eos);
  r.settings.structured = {OutputFormat::JsonObject, ""};
  EXPECT_THROW(no_tokenizer.submit(r), RequestError);
}

}  // namespace
}  // namespace hearth::structured
