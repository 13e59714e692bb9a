// hearth-gateway's engine profiles, issue 24 item 6: each --profile is read at startup as its
// workers will read it, so a bad key or a request-settings file stops the gateway before it
// serves, naming the profile and the key; a good one serves NAME:PROFILE.

#include <fstream>

#include <gtest/gtest.h>

#include "tests/gateway/gateway_process.h"
#include "tests/support/temp_dir.h"

namespace hearth::test {
namespace {

using namespace std::chrono_literals;

std::filesystem::path write(const TempDir& dir, const std::string& name, const std::string& text) {
  const auto path = dir / name;
  std::ofstream(path) << text;
  return path;
}

struct Refusal {
  ExitStatus status;
  std::string stdout_text, stderr_text;
};

// Runs a gateway expected to refuse its command line: it must exit on its own, before serving.
Refusal refused_gateway(const TempDir& dir, const std::vector<std::string>& extra) {
  const std::vector<std::string> argv = gateway_command(extra);
  const auto err = dir / "gateway.err";
  ChildProcess p = ChildProcess::spawn(ChildProcess::Options(argv)
                                           .stdout_to(ChildProcess::Stream::file(dir / "out"))
                                           .stderr_to(ChildProcess::Stream::file(err)));
  const auto status = p.wait_until(std::chrono::steady_clock::now() + 60s);
  if (!status) {
    p.kill_group();
    ADD_FAILURE() << "the gateway kept running";
    return {};
  }
  auto slurp = [](const std::filesystem::path& f) {
    std::ifstream in(f);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  return {*status, slurp(dir / "out"), slurp(err)};
}

// Issue 24 item 6: --profile x={"nonsense":1} started, and the first request got a 503 with
// Retry-After; a request-settings file given as an engine profile was accepted and ignored.
TEST(GatewayProfiles, ABadProfileStopsTheGatewayBeforeItServesNamingProfileAndKey) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"nonsense": 1})", "'nonsense'"},
      {R"({"temperature": 0.8, "top_p": 0.95, "max_tokens": 100})", "'temperature'"},
      {R"({"context_length": "long"})", "'context_length'"},
      {R"({"prompt": "x"})", "'prompt'"},
      {"[1, 2]", "JSON object"},
  };
  for (const auto& [text, named] : cases) {
    const auto file = write(dir, "engine-x.json", text);
    const Refusal r = refused_gateway(dir, {"--profile", "x=" + file.string()});
    EXPECT_FALSE(r.status.exited_with(0)) << text << ": " << r.status.describe();
    EXPECT_EQ(r.stdout_text.find("listening"), std::string::npos) << r.stdout_text;
    EXPECT_NE(r.stderr_text.find("--profile x (" + file.string() + ")"), std::string::npos)
        << text << ": " << r.stderr_text;
    EXPECT_NE(r.stderr_text.find(named), std::string::npos) << text << ": " << r.stderr_text;
  }
  const Refusal missing =
      refused_gateway(dir, {"--profile", "x=" + (dir / "absent.json").string()});
  EXPECT_FALSE(missing.status.exited_with(0));
  EXPECT_NE(missing.stderr_text.find("absent.json"), std::string::npos) << missing.stderr_text;
}

// The README's example profile, served: the profile's shorter context is the worker's, and a
// request over it is refused with OpenAI's code and no internal id (issue 24 item 5).
TEST(GatewayProfiles, TheReadmesEngineProfileServes) {
  const auto readme_profile = source_dir() / "gateway/profiles/engine-small.json";
  GatewayProcess gw({"--profile", "small=" + readme_profile.string()});
  const auto ok =
      gw.post("/v1/completions",
              {{"model", "fortunes:small"}, {"prompt", "Never"}, {"max_tokens", 8}, {"seed", 1}});
  ASSERT_EQ(ok.status, 200) << ok.body;
  // models.retrieve() finds it too, its ':' encoded as clients encode it.
  const auto retrieved = gw.get("/v1/models/fortunes%3Asmall");
  ASSERT_EQ(retrieved.status, 200) << retrieved.body;
  EXPECT_EQ(retrieved.parsed()["id"], "fortunes:small");
  const int context = json::parse(std::ifstream(readme_profile))["context_length"].get<int>();
  std::string words;
  for (int i = 0; i < context; ++i) words += " cat";
  const auto over = gw.post("/v1/completions",
                            {{"model", "fortunes:small"}, {"prompt", words}, {"max_tokens", 4}});
  EXPECT_EQ(over.status, 400) << over.body;
  const json e = over.parsed()["error"];
  EXPECT_EQ(e["code"], "context_length_exceeded") << over.body;
  EXPECT_EQ(e["param"], "prompt") << over.body;
  EXPECT_EQ(
      e["message"].get<std::string>().rfind(
          "This model's maximum context length is " + std::to_string(context) + " tokens.", 0),
      0u)
      << over.body;
}

// A worker whose context the gateway does not know (set by --worker-arg) refuses the request
// itself: still a 400 with OpenAI's code and the field, and without the worker's request id.
TEST(GatewayProfiles, AWorkersOwnRefusalHasNoInternalId) {
  GatewayProcess gw({"--worker-arg=--context-length", "--worker-arg=64"});
  std::string words;
  for (int i = 0; i < 100; ++i) words += " cat";
  const auto over =
      gw.post("/v1/completions", {{"model", "fortunes"}, {"prompt", words}, {"max_tokens", 4}});
  EXPECT_EQ(over.status, 400) << over.body;
  const json e = over.parsed()["error"];
  EXPECT_EQ(e["code"], "context_length_exceeded") << over.body;
  EXPECT_EQ(e["param"], "prompt") << over.body;
  EXPECT_EQ(e["message"].get<std::string>().find("cmpl-"), std::string::npos) << over.body;
  EXPECT_EQ(e["message"].get<std::string>().find("request '"), std::string::npos) << over.body;
}

}  // namespace
}  // namespace hearth::test
