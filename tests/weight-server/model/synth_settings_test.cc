// hearth-synth --set KEY=VALUE (set_config_key): VALUE is JSON where it parses, else a string; a
// setting without a key is refused; a preset written with fewer layers keeps its widths and has
// only those layers' tensors; a value the config cannot take is refused naming the key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "tools/synth_model.h"
#include "weight-server/model/hf_model.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

TEST(SynthSettings, ValueIsJsonWhereItParsesElseAString) {
  SynthOptions opt;
  set_config_key(opt, "num_hidden_layers=2");
  set_config_key(opt, "tie_word_embeddings=false");
  set_config_key(opt, "model_type=llama");
  set_config_key(opt, "rope_scaling={\"type\": \"linear\", \"factor\": 2}");
  set_config_key(opt, "num_hidden_layers=3");  // the last one holds
  EXPECT_EQ(opt.config_overrides["num_hidden_layers"], json(3));
  EXPECT_EQ(opt.config_overrides["tie_word_embeddings"], json(false));
  EXPECT_EQ(opt.config_overrides["model_type"], json("llama"));
  EXPECT_EQ(opt.config_overrides["rope_scaling"]["factor"], json(2));
}

TEST(SynthSettings, RefusesASettingWithoutAKey) {
  for (const char* bad : {"num_hidden_layers", "=2", ""}) {
    SynthOptions opt;
    EXPECT_THROW(set_config_key(opt, bad), std::invalid_argument) << bad;
  }
}

class SynthSettingsModel : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("hearth_synth_set_" + std::to_string(::getpid()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(SynthSettingsModel, FewerLayersKeepThePresetsWidths) {
  SynthOptions full, one;
  one.config_overrides = json::object();
  set_config_key(one, "num_hidden_layers=1");
  const SynthResult a = write_synthetic_model(root_ / "full", full);
  const SynthResult b = write_synthetic_model(root_ / "one", one);
  ASSERT_GT(a.config.n_layers, 1);
  EXPECT_EQ(b.config.n_layers, 1);
  EXPECT_EQ(b.config.hidden, a.config.hidden);
  EXPECT_EQ(b.config.intermediate, a.config.intermediate);
  EXPECT_EQ(b.config.vocab, a.config.vocab);
  const HfModel model = HfModel::open(root_ / "one");
  EXPECT_EQ(model.config().n_layers, 1);
  EXPECT_NE(model.find("model.layers.0.mlp.down_proj.weight"), nullptr);
  EXPECT_EQ(model.find("model.layers.1.mlp.down_proj.weight"), nullptr);
}

TEST_F(SynthSettingsModel, AValueTheConfigCannotTakeIsRefusedNamingTheKey) {
  for (const char* bad : {"num_hidden_layers=0", "num_hidden_layers=two"}) {
    SynthOptions opt;
    set_config_key(opt, bad);
    try {
      write_synthetic_model(root_ / "bad", opt);
      ADD_FAILURE() << bad << ": written";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("num_hidden_layers"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace hearth
