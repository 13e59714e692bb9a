// hearth-synth --tokenizer: a real tokenizer's ids all get an embedding row (the preset's
// vocabulary grows to hold them, an explicit vocab_size too small is refused), BOS/EOS follow
// its tokenizer_config.json, and both files are copied as they are.
#include <gtest/gtest.h>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tools/synth_model.h"
#include "weight-server/model/hf_model.h"
#include "base/read_file.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class SynthRealTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("hearth_synth_tok_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "tok");
    // Ids up to 699: more than the tiny preset's 512.
    json vocab = json::object();
    for (int i = 0; i < 256; ++i) vocab["t" + std::to_string(i)] = i;
    const json tokenizer = {
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}},
        {"added_tokens",
         {{{"id", 698}, {"content", "<s>"}, {"special", true}},
          {{"id", 699}, {"content", "</s>"}, {"special", true}}}}};
    write(root_ / "tok" / "tokenizer.json", tokenizer.dump());
    write(root_ / "tok" / "tokenizer_config.json",
          json{{"bos_token", "<s>"}, {"eos_token", {{"content", "</s>"}}}}.dump());
  }
  void TearDown() override { fs::remove_all(root_); }

  static void write(const fs::path& p, const std::string& text) {
    FILE* f = std::fopen(p.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }

  fs::path root_;
};

TEST_F(SynthRealTokenizer, VocabularyGrowsToHoldTheTokenizersIds) {
  SynthOptions opt;
  opt.tokenizer_path = (root_ / "tok").string();  // a directory: both files
  const SynthResult r = write_synthetic_model(root_ / "model", opt);
  EXPECT_EQ(r.config.vocab, 700);
  const json config = json::parse(read_file(root_ / "model" / "config.json"));
  EXPECT_EQ(config["vocab_size"], 700);
  EXPECT_EQ(config["bos_token_id"], 698);
  EXPECT_EQ(config["eos_token_id"], 699);
  const json generation = json::parse(read_file(root_ / "model" / "generation_config.json"));
  EXPECT_EQ(generation["eos_token_id"], 699);
  EXPECT_EQ(read_file(root_ / "model" / "tokenizer.json"),
            read_file(root_ / "tok" / "tokenizer.json"));
  EXPECT_EQ(read_file(root_ / "model" / "tokenizer_config.json"),
            read_file(root_ / "tok" / "tokenizer_config.json"));
  const HfModel model = HfModel::open(root_ / "model");
  EXPECT_EQ(model.find("model.embed_tokens.weight")->info.shape[0], 700);
}

TEST_F(SynthRealTokenizer, ExplicitVocabularyTooSmallIsRefused) {
  SynthOptions opt;
  opt.tokenizer_path = (root_ / "tok" / "tokenizer.json").string();
  opt.config_overrides = {{"vocab_size", 600}};
  try {
    write_synthetic_model(root_ / "model", opt);
    ADD_FAILURE() << "written";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("vocab_size 600 is too small"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("need 700"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hearth
