// Tensor parallelism served through the gateway (issue 26), on the CPU engine: a gateway whose
// own weight server shards the default model for 2 ranks (memfd, one piece per rank and tensor)
// and CPU workers running both ranks on the server's pieces. A chat completion gives the tokens
// and logprobs of a single-process TP=2 worker on the same prompt tokens, and logprobs other
// than TP=1's (the split sums round differently); a profile of another degree is refused by
// name; TP=2 and TP=1 workers never reuse each other's prefix KV (the degree is in the cache
// domain), while two TP=2 profiles do.
#include <cmath>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/gateway/gateway_process.h"
#include "tests/gateway/single_process_generation.h"
#include "tests/support/temp_dir.h"

namespace hearth::test {
namespace {

const json kMessages = json::array({{{"role", "user"}, {"content", "Tell me a fortune."}}});

std::filesystem::path write_profile(const TempDir& dir, const std::string& name,
                                    int tensor_parallel) {
  const auto file = dir / (name + ".json");
  std::ofstream(file) << json{{"name", name}, {"tensor_parallel", tensor_parallel}}.dump();
  return file;
}

Generation chat(const GatewayProcess& g, const std::string& model) {
  const auto r = g.post("/v1/chat/completions", {{"model", model},
                                                 {"messages", kMessages},
                                                 {"max_tokens", 24},
                                                 {"temperature", 0},
                                                 {"logprobs", true}});
  EXPECT_EQ(r.status, 200) << r.body;
  const json j = r.parsed();
  Generation out;
  if (r.status != 200) return out;
  const json& choice = j["choices"][0];
  out.text = choice["message"]["content"].get<std::string>();
  for (const json& t : choice["logprobs"]["content"]) out.logprobs.push_back(t["logprob"]);
  return out;
}

// The prompt tokens the gateway runs for kMessages (its chat template, rendered and encoded).
std::vector<int32_t> chat_prompt_tokens(const GatewayProcess& g) {
  const auto r = g.post("/tokenize", {{"model", "fortunes"}, {"messages", kMessages}});
  EXPECT_EQ(r.status, 200) << r.body;
  return r.parsed()["tokens"].get<std::vector<int32_t>>();
}

// A single-process CPU worker (no server: the engine cuts its ranks' pieces from the model
// directory) generating greedily from `tokens` with `tensor_parallel` ranks.
Generation single_process(const std::vector<int32_t>& tokens, int tensor_parallel,
                          const TempDir& dir) {
  return single_process_generation(
      tokens, 24, dir,
      {"--backend", "cpu", "--set", "tensor_parallel=" + std::to_string(tensor_parallel)});
}

TEST(GatewayTensorParallel, ServedTp2IsTheSingleProcessTp2EngineAndNotTp1) {
  TempDir dir;
  const std::string tp2 = "tp2=" + write_profile(dir, "tp2", 2).string();
  GatewayProcess sharded({"--tensor-parallel", "2", "--profile", tp2});
  const std::vector<int32_t> prompt = chat_prompt_tokens(sharded);
  ASSERT_GT(prompt.size(), 2u);

  const Generation served = chat(sharded, "fortunes:tp2");
  ASSERT_FALSE(served.logprobs.empty());
  EXPECT_EQ(served, single_process(prompt, 2, dir));
  // The default profile takes the model's degree: the same engine, the same bits.
  EXPECT_EQ(chat(sharded, "fortunes"), served);

  // TP=1 (an unsharded server) sums o_proj and down in one piece: other logprob bits, each
  // still a well-formed logprob.
  GatewayProcess plain;
  const Generation tp1 = chat(plain, "fortunes");
  ASSERT_FALSE(tp1.logprobs.empty());
  EXPECT_EQ(tp1, single_process(prompt, 1, dir));
  EXPECT_NE(tp1.logprobs, served.logprobs);
  for (double lp : tp1.logprobs) EXPECT_TRUE(std::isfinite(lp) && lp <= 0) << lp;
}

TEST(GatewayTensorParallel, AProfileOfAnotherDegreeIsRefusedByName) {
  TempDir dir;
  const std::string tp1 = "tp1=" + write_profile(dir, "tp1", 1).string();
  const std::string tp4 = "tp4=" + write_profile(dir, "tp4", 4).string();
  GatewayProcess sharded({"--tensor-parallel", "2", "--profile", tp1, "--profile", tp4});
  for (const char* model : {"fortunes:tp1", "fortunes:tp4"}) {
    const auto r = sharded.post("/v1/chat/completions",
                                {{"model", model}, {"messages", kMessages}, {"max_tokens", 4}});
    EXPECT_EQ(r.status, 400) << r.body;
    const json error = r.parsed()["error"];
    EXPECT_EQ(error["code"], "tensor_parallel_mismatch") << r.body;
    EXPECT_NE(error["message"].get<std::string>().find("shards fortunes for tensor parallel 2"),
              std::string::npos)
        << r.body;
  }
  // The refusal started no worker and left the gateway serving.
  EXPECT_FALSE(chat(sharded, "fortunes").logprobs.empty());
}

// --tensor-parallel shards the gateway's own server; with --server it is refused at startup.
TEST(GatewayTensorParallel, ADegreeForSomeoneElsesServerIsRefused) {
  TempDir dir;
  ChildProcess p = ChildProcess::spawn(
      ChildProcess::Options({gateway_binary("hearth-gateway"), "--server",
                             (dir / "absent.sock").string(), "--tensor-parallel", "2"})
          .stdout_to(ChildProcess::Stream::file(dir / "out"))
          .stderr_to(ChildProcess::Stream::file(dir / "err")));
  EXPECT_FALSE(p.wait().success());
  std::ifstream err(dir / "err");
  const std::string text(std::istreambuf_iterator<char>(err), {});
  EXPECT_NE(text.find("--tensor-parallel shards the gateway's own server"), std::string::npos)
      << text;
}

TEST(GatewayTensorParallel, TheDegreeIsPartOfThePrefixCacheDomain) {
  TempDir dir;
  const std::string tp2 = "tp2=" + write_profile(dir, "tp2", 2).string();
  const std::string tp2b = "tp2b=" + write_profile(dir, "tp2b", 2).string();
  // Unsharded: each TP=2 worker cuts its ranks' pieces itself, next to TP=1 workers.
  GatewayProcess gw({"--profile", tp2, "--profile", tp2b});
  const std::string prompt =
      "The lighthouse keeper counted the ships that passed each night, and wrote their names "
      "in a book that nobody else had ever read, until one winter a child climbed the stairs "
      "and asked him why the ships never stopped at the island";
  auto cached = [&](const std::string& model) {
    const auto r =
        gw.post("/v1/completions",
                {{"model", model}, {"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}});
    EXPECT_EQ(r.status, 200) << r.body;
    return r.parsed()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  };
  EXPECT_EQ(cached("fortunes"), 0);  // TP=1 publishes its blocks
  // A cold TP=2 worker finds none of them: another domain.
  EXPECT_EQ(cached("fortunes:tp2"), 0);
  // A second, cold TP=2 worker finds the first one's (same domain, whole 16-token blocks).
  const int shared = cached("fortunes:tp2b");
  EXPECT_GE(shared, 48);
  EXPECT_EQ(shared % 16, 0);
}

}  // namespace
}  // namespace hearth::test
