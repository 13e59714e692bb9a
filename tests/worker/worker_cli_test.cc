// hearth-worker as a user runs it: real process, real model directory, exit codes and output.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/support/paths.h"
#include "tests/support/temp_dir.h"

namespace hearth {
namespace {

using json = nlohmann::json;

struct Result {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result worker(const std::string& args) {
  const std::string stem = (test::process_scratch_dir() / "worker_cli").string();
  const std::string out = stem + ".out", err = stem + ".err";
  const std::string cmd =
      std::string(HEARTH_BINARY_DIR) + "/bin/hearth-worker " + args + " > " + out + " 2> " + err;
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

const std::string kModel = (test::source_dir() / "models/hearth-tiny-fortunes").string();

TEST(WorkerCli, HelpAndVersion) {
  Result r = worker("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--prompt-tokens"), std::string::npos);
  EXPECT_NE(r.out.find("--server"), std::string::npos);
}

TEST(WorkerCli, JsonlStreamsTokensThenASummary) {
  Result r = worker("--model " + kModel +
                    " --backend cpu --prompt 'A computer' --temperature 0 --max-tokens 5 "
                    "--format jsonl --set ignore_eos=true");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::stringstream lines(r.out);
  std::vector<json> events;
  for (std::string line; std::getline(lines, line);) events.push_back(json::parse(line));
  ASSERT_EQ(events.size(), 6u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(events[i]["token"].is_number_integer());
    EXPECT_TRUE(events[i]["text"].is_string());
    EXPECT_LE(events[i]["logprob"].get<double>(), 0.0);
  }
  const json& done = events.back();
  EXPECT_EQ(done["done"], true);
  EXPECT_EQ(done["stop"], "length");
  EXPECT_EQ(done["generated_tokens"], 5);
  EXPECT_EQ(done["prompt_tokens"], 3);  // <|bos|> A computer
  EXPECT_TRUE(done["timings"].contains("prefill_ms"));
}

TEST(WorkerCli, PromptTokensAreUsedExactlyAndLogitsDumped) {
  const std::string logits = (test::process_scratch_dir() / "worker_cli_logits.json").string();
  Result r =
      worker("--model " + kModel + " --backend cpu --prompt-tokens 0,990,325 --max-tokens 0 " +
             "--format jsonl --dump-logits " + logits);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json dump = json::parse(slurp(logits));
  EXPECT_EQ(dump["prompt_tokens"], 3);
  EXPECT_EQ(dump["logits"].size(), 4096u);
}

TEST(WorkerCli, StopStringsCutTheText) {
  Result plain =
      worker("--model " + kModel + " --backend cpu --prompt 'A computer' --temperature 0");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_NE(plain.out.find(" is"), std::string::npos) << plain.out;
  Result cut = worker("--model " + kModel +
                      " --backend cpu --prompt 'A computer' --temperature 0 --stop ' is'");
  ASSERT_EQ(cut.exit_code, 0) << cut.err;
  EXPECT_EQ(cut.out, plain.out.substr(0, plain.out.find(" is")) + "\n");
}

TEST(WorkerCli, ProfileFileWithFlagOverrides) {
  const std::string profile = (test::process_scratch_dir() / "worker_cli_profile.json").string();
  std::ofstream(profile) << R"({"temperature": 0, "max_tokens": 3, "ignore_eos": true})";
  Result r = worker("--model " + kModel + " --backend cpu --prompt Hi --format jsonl --profile " +
                    profile + " --max-tokens 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"generated_tokens\":2"), std::string::npos) << r.out;
}

TEST(WorkerCli, BadInputIsAClearErrorAndNonZeroExit) {
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"--model " + kModel + " --backend cpu",
       "give --prompt, --prompt-file, --prompt-tokens, --requests or --serve"},
      {"--model " + kModel + " --prompt-file /nonexistent.txt", "/nonexistent.txt"},
      {"--model " + kModel + " --prompt-file /tmp", "/tmp: is a directory, not a file"},
      {"--model " + kModel + " --prompt hi --prompt-file /etc/hostname", "excludes"},
      {"--model " + kModel + " --backend cpu --prompt-tokens 1,x,3", "'x' is not a token id"},
      {"--model " + kModel + " --backend cpu --prompt-tokens 1,99999", "outside the vocabulary"},
      {"--model /nonexistent/model --prompt hi", "/nonexistent/model"},
      {"--model " + kModel + " --prompt hi --set temprature=1", "unknown profile key 'temprature'"},
      {"--model " + kModel + " --prompt hi --profile /nonexistent.json", "/nonexistent.json"},
      {"--model " + kModel + " --backend cpu --prompt hi --context-length 100000", "exceeds"},
      // Values that used to be taken wrongly: wrapped, saturated, null, or a dropped item.
      {"--model " + kModel + " --prompt hi --seed -1", "'-1' is not a seed"},
      {"--model " + kModel + " --prompt hi --seed 18446744073709551616", "is not a seed"},
      {"--model " + kModel + " --prompt hi --seed 1e23", "'1e23' is not a seed"},
      {"--model " + kModel + " --prompt hi --temperature nan", "'nan' is not a finite number"},
      {"--model " + kModel + " --prompt hi --top-p inf", "'inf' is not a finite number"},
      {"--model " + kModel + " --prompt hi --min-p -nan", "is not a finite number"},
      {"--model " + kModel + " --backend cpu --prompt-tokens 5,", "'5,' has an empty item"},
      {"--model " + kModel + " --prompt hi --profile /tmp", "/tmp: is a directory, not a file"},
      // Issue 21: "Could not convert", without the range.
      {"--model " + kModel + " --prompt hi --max-tokens 2147483648",
       "--max-tokens: '2147483648' is not an integer from 0 to 16777216"},
      {"--model " + kModel + " --prompt hi --top-k -1", "--top-k: '-1' is not an integer from 0"},
      {"--model " + kModel + " --prompt hi --context-length 1e9",
       "--context-length: '1e9' is not an integer from 0 to 1048576"},
  };
  for (const Case& c : cases) {
    Result r = worker(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
  }
}

// Issue 21: a single-process worker no longer scans tokenizer.json at open (its image, built
// from the same bytes, or the tokenizer's parser checks it); a bad one is still refused, by the
// parser, with the file and the fault named.
TEST(WorkerCli, ABadTokenizerJsonIsRefusedByTheTokenizer) {
  namespace fs = std::filesystem;
  const fs::path dir = test::process_scratch_dir() / "worker_cli_tok";
  fs::remove_all(dir);
  fs::copy(kModel, dir);
  ::setenv("HEARTH_TOKENIZER_IMAGE_CACHE", (dir / "cache").c_str(), 1);
  const std::pair<std::string, std::string> cases[] = {
      {"{\"model\": \"caf\xe9\"}", "not valid UTF-8 at offset 14"},
      {std::string(100000, '['), "nested deeper than"},
  };
  for (const auto& [text, message] : cases) {
    std::ofstream(dir / "tokenizer.json", std::ios::binary | std::ios::trunc) << text;
    Result r = worker("--model " + dir.string() + " --backend cpu --prompt hi --max-tokens 1");
    EXPECT_NE(r.exit_code, 0) << message;
    EXPECT_NE(r.err.find("tokenizer.json"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  }
  ::unsetenv("HEARTH_TOKENIZER_IMAGE_CACHE");
  fs::remove_all(dir);
}

TEST(WorkerCli, TheWholeSeedRangeIsAccepted) {
  Result r = worker("--model " + kModel +
                    " --backend cpu --prompt-tokens 1,2 --max-tokens 1 --temperature 0.8 "
                    "--seed 18446744073709551615");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// --prompt-file FILE and --prompt-file - (stdin) give the prompt's bytes exactly as --prompt
// does; stdin carries prompts far beyond the 128 KiB a single argument may hold.
TEST(WorkerCli, PromptFromAFileOrStdin) {
  const std::string dir = test::process_scratch_dir().string();
  const std::string file = dir + "/worker_cli_prompt.txt";
  std::ofstream(file, std::ios::binary) << "A computer";
  const std::string args = "--model " + kModel +
                           " --backend cpu --temperature 0 --max-tokens 4 --format jsonl "
                           "--set ignore_eos=true ";
  Result direct = worker(args + "--prompt 'A computer'");
  ASSERT_EQ(direct.exit_code, 0) << direct.err;
  Result from_file = worker(args + "--prompt-file " + file);
  ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
  Result from_stdin = worker(args + "--prompt-file - < " + file);
  ASSERT_EQ(from_stdin.exit_code, 0) << from_stdin.err;
  // The token events, without the final one (its timings differ run to run; its keys are sorted,
  // so "done" is not its first).
  auto tokens = [](const std::string& out) {
    return out.substr(0, out.find("\n{\"cached_tokens\""));
  };
  EXPECT_EQ(tokens(from_file.out), tokens(direct.out));
  EXPECT_EQ(tokens(from_stdin.out), tokens(direct.out));

  // 1 MiB of text: too long for argv, read whole from stdin and tokenized; what stops it is
  // the context length, not the way in.
  std::ofstream(file, std::ios::binary) << std::string(1 << 20, 'a');
  Result big = worker(args + "--prompt-file - < " + file);
  EXPECT_NE(big.exit_code, 0);
  EXPECT_NE(big.err.find("context"), std::string::npos) << big.err;
}

TEST(WorkerCli, CudaWithoutADeviceSaysSo) {
  int devices = 0;
  if (std::system("nvidia-smi -L > /dev/null 2>&1") == 0)
    GTEST_SKIP() << "this machine has a GPU; the no-device path is for machines without one";
  (void)devices;
  Result r = worker("--model " + kModel + " --backend cuda --prompt hi");
  EXPECT_NE(r.exit_code, 0);
  const bool said = r.err.find("no CUDA device was found") != std::string::npos ||
                    r.err.find("built without CUDA") != std::string::npos;
  EXPECT_TRUE(said) << r.err;
}

}  // namespace
}  // namespace hearth
