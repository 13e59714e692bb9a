// hearth-tokenize end to end: JSON lines in, JSON lines out, clear failures, tokenizer images
// and the image cache.

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tokenizer_test_util.h"

namespace hearth::tok::testing {
namespace {

struct Result {
  int status;
  std::string out;  // stdout and stderr together
};

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("hearth_tokenize_cli_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    json config = toy_config({"a", "b", "ab", " ", "\xC3\xA9"}, {"a b"});
    config["added_tokens"] = {{{"id", 5}, {"content", "<s>"}, {"special", true}}};
    config["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", "<s> $A"},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {5}}, {"tokens", {"<s>"}}}}}}};
    std::ofstream(dir_ / "tokenizer.json") << config.dump();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs with the image cache in cache_dir() rather than the user's.
  Result run(const std::string& args, const std::string& input) {
    const std::filesystem::path in = dir_ / "input.txt";
    std::ofstream(in, std::ios::binary) << input;
    const std::string cmd = "HEARTH_TOKENIZER_IMAGE_CACHE=" + cache_dir().string() + " " +
                            std::string(HEARTH_BINARY_DIR) + "/bin/hearth-tokenize " + args +
                            " < " + in.string() + " 2>&1";
    FILE* pipe = ::popen(cmd.c_str(), "r");
    EXPECT_NE(pipe, nullptr);
    Result r{-1, ""};
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) r.out.append(buf, n);
    const int status = ::pclose(pipe);
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
  }

  std::filesystem::path cache_dir() const { return dir_ / "cache"; }

  std::vector<std::filesystem::path> cached_images() const {
    std::vector<std::filesystem::path> files;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(cache_dir(), ec)) {
      files.push_back(e.path());
    }
    return files;
  }

  std::filesystem::path dir_;
};

TEST_F(Cli, EncodesOneJsonStringPerLine) {
  const Result r = run("--tokenizer " + dir_.string(), "\"ab a\"\n\"\"\n\"b\\u00e9<s>\"\n");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "[2,3,0]\n[]\n[1,4,5]\n");
}

TEST_F(Cli, AddsSpecialTokensOnRequest) {
  const Result r = run(
      "--tokenizer " + (dir_ / "tokenizer.json").string() + " --add-special-tokens", "\"ab\"\r\n");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "[5,2]\n");
}

TEST_F(Cli, DecodesIdArrays) {
  const Result r = run("--tokenizer " + dir_.string() + " --decode", "[5,2,4]\n[]\n[999]\n");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "\"<s> ab \xC3\xA9\"\n\"\"\n\"\"\n");
  const Result skip =
      run("--tokenizer " + dir_.string() + " --decode --skip-special-tokens", "[5,2]\n");
  EXPECT_EQ(skip.out, "\"ab\"\n");
}

TEST_F(Cli, BadInputFailsNamingTheLine) {
  Result r = run("--tokenizer " + dir_.string(), "\"ok\"\nnot json\n\"never reached\"\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("line 2"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("never"), std::string::npos) << r.out;
  r = run("--tokenizer " + dir_.string(), "[1, 2]\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("expected a JSON string"), std::string::npos) << r.out;
  r = run("--tokenizer " + dir_.string() + " --decode", "[1, -2]\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("token ids"), std::string::npos) << r.out;
  r = run("--tokenizer " + dir_.string(), "\"\xFF\"\n");  // JSON must be UTF-8
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("line 1"), std::string::npos) << r.out;
}

TEST_F(Cli, MissingOrBrokenTokenizerFails) {
  Result r = run("--tokenizer " + (dir_ / "missing").string(), "");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("cannot open"), std::string::npos) << r.out;
  r = run("", "");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--tokenizer or --image"), std::string::npos) << r.out;
}

TEST_F(Cli, HelpDescribesTheFormat) {
  const Result r = run("--help", "");
  EXPECT_EQ(r.status, 0);
  for (const char* s : {"JSON string", "--decode", "--image", "--build-image", "--no-cache",
                        "--cache-dir", "HEARTH_TOKENIZER_IMAGE_CACHE"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s << " missing from\n" << r.out;
  }
}

TEST_F(Cli, BuiltImageEncodesAndDecodesLikeTheJson) {
  const std::filesystem::path image = dir_ / "toy.tokimg";
  Result r = run("--tokenizer " + dir_.string() + " --build-image " + image.string(), "");
  ASSERT_EQ(r.status, 0) << r.out;
  ASSERT_TRUE(std::filesystem::exists(image));
  r = run("--image " + image.string() + " --add-special-tokens", "\"ab a\"\n\"b\\u00e9<s>\"\n");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "[5,2,3,0]\n[5,1,4,5]\n");
  r = run("--image " + image.string() + " --decode", "[5,2,4]\n");
  EXPECT_EQ(r.out, "\"<s> ab \xC3\xA9\"\n");
}

TEST_F(Cli, ABadImageIsRefused) {
  Result r = run("--image " + (dir_ / "tokenizer.json").string(), "\"a\"\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("not a hearth tokenizer image"), std::string::npos) << r.out;
  r = run("--tokenizer " + dir_.string() + " --build-image " + (dir_ / "no/such/dir/x").string(),
          "");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("cannot create"), std::string::npos) << r.out;
}

TEST_F(Cli, UsesTheImageCacheUnlessTold) {
  Result r = run("--tokenizer " + dir_.string() + " --no-cache", "\"ab\"\n");
  EXPECT_EQ(r.out, "[2]\n");
  EXPECT_TRUE(cached_images().empty()) << "--no-cache wrote to the cache";

  r = run("--tokenizer " + dir_.string(), "\"ab\"\n");
  EXPECT_EQ(r.out, "[2]\n");
  ASSERT_EQ(cached_images().size(), 1u);
  const std::filesystem::path image = cached_images()[0];
  r = run("--tokenizer " + dir_.string(), "\"ab\"\n");  // a hit: same result, no message
  EXPECT_EQ(r.out, "[2]\n");

  // A damaged cached image is reported, replaced, and the output is still right.
  std::fstream(image, std::ios::in | std::ios::out | std::ios::binary).seekp(300).put('\x7F');
  r = run("--tokenizer " + dir_.string(), "\"ab\"\n");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("checksum mismatch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[2]\n"), std::string::npos) << r.out;
  r = run("--tokenizer " + dir_.string(), "\"ab\"\n");
  EXPECT_EQ(r.out, "[2]\n") << "the damaged image was not replaced";

  // --cache-dir points elsewhere.
  const std::filesystem::path other = dir_ / "other";
  r = run("--tokenizer " + dir_.string() + " --cache-dir " + other.string(), "\"ab\"\n");
  EXPECT_EQ(r.out, "[2]\n");
  EXPECT_FALSE(std::filesystem::is_empty(other));
}

}  // namespace
}  // namespace hearth::tok::testing
