#include "weight-server/model/hf_model.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/support/temp_dir.h"
#include "tests/weight-server/model/rewrite_weights.h"
#include "tools/synth_model.h"
#include "weight-server/model/host_store.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using test::rewrite_weights;

fs::path fresh_dir(const std::string& name) {
  fs::path dir = test::process_scratch_dir() / ("hf_model_" + name);
  fs::remove_all(dir);
  return dir;
}

fs::path synth(const std::string& name, SynthOptions opt = {}) {
  fs::path dir = fresh_dir(name);
  write_synthetic_model(dir, opt);
  return dir;
}

void expect_open_error(const fs::path& dir, std::initializer_list<std::string> fragments) {
  try {
    HfModel::open(dir);
    FAIL() << "opened, expected an error";
  } catch (const std::runtime_error& e) {
    for (const auto& f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

TEST(HfModel, OpensEveryPresetArchitecture) {
  for (const char* preset :
       {"tiny-llama", "tiny-llama3", "tiny-mistral", "tiny-qwen2", "tiny-qwen3"}) {
    SynthOptions opt;
    opt.preset = preset;
    HfModel m = HfModel::open(synth(preset, opt));
    EXPECT_EQ(m.tensors().size(), expected_tensors(m.config()).size()) << preset;
    EXPECT_FALSE(m.tokenizer_json().empty());
    HostStore store(std::make_shared<HfModel>(std::move(m)));
    EXPECT_NE(store.find("model.norm.weight"), nullptr);
    EXPECT_EQ(store.at("model.embed_tokens.weight").info.dtype, DType::BF16);
  }
}

TEST(HfModel, OpensShardedModelsThroughTheIndex) {
  SynthOptions opt;
  opt.shard_gb = 0.0001;  // 100 kB shards
  fs::path dir = synth("sharded", opt);
  ASSERT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  ASSERT_FALSE(fs::exists(dir / "model.safetensors"));
  HfModel sharded = HfModel::open(dir);
  HfModel single = HfModel::open(synth("unsharded"));
  ASSERT_EQ(sharded.tensors().size(), single.tensors().size());
  for (size_t i = 0; i < single.tensors().size(); ++i) {
    const auto& a = single.tensors()[i];
    const HfTensor* b = sharded.find(a.info.name);
    ASSERT_NE(b, nullptr);
    ASSERT_EQ(a.data.size(), b->data.size());
    EXPECT_EQ(std::memcmp(a.data.data(), b->data.data(), a.data.size()), 0) << a.info.name;
  }
}

TEST(HfModel, SeedsChangeValuesAndAreReproducible) {
  SynthOptions a, b;
  b.seed = 1;
  HfModel m0 = HfModel::open(synth("seed0", a));
  HfModel m0again = HfModel::open(synth("seed0again", a));
  HfModel m1 = HfModel::open(synth("seed1", b));
  const auto& t0 = m0.tensors()[1].data;
  EXPECT_EQ(std::memcmp(t0.data(), m0again.tensors()[1].data.data(), t0.size()), 0);
  EXPECT_NE(std::memcmp(t0.data(), m1.tensors()[1].data.data(), t0.size()), 0);
}

TEST(HfModel, RefusesMissingPieces) {
  expect_open_error(fresh_dir("nothing"), {"not a model directory"});
  fs::path dir = synth("no_config");
  fs::remove(dir / "config.json");
  expect_open_error(dir, {"no config.json"});
  dir = synth("no_weights");
  fs::remove(dir / "model.safetensors");
  expect_open_error(dir, {"no model.safetensors"});
  dir = synth("bad_config");
  std::ofstream(dir / "config.json") << "{not json";
  expect_open_error(dir, {"config.json", "invalid JSON"});
}

TEST(HfModel, RefusesMissingUnexpectedAndMisshapenTensors) {
  fs::path dir = synth("missing_tensor");
  rewrite_weights(dir, [](auto& specs) {
    std::erase_if(specs,
                  [](const auto& s) { return s.name == "model.layers.1.mlp.up_proj.weight"; });
  });
  expect_open_error(dir, {"missing tensor 'model.layers.1.mlp.up_proj.weight'"});

  dir = synth("unexpected_tensor");
  rewrite_weights(dir, [](auto& specs) { specs.push_back({"model.extra.weight", "F32", {2}}); });
  expect_open_error(dir, {"model.safetensors", "unexpected tensor 'model.extra.weight'"});

  dir = synth("bad_shape");
  rewrite_weights(dir, [](auto& specs) {
    for (auto& s : specs)
      if (s.name == "model.layers.0.self_attn.k_proj.weight") s.shape = {64, 64};
  });
  expect_open_error(dir, {"'model.layers.0.self_attn.k_proj.weight'", "[64, 64]", "[32, 64]"});

  dir = synth("rope_table");
  rewrite_weights(dir, [](auto& specs) {
    specs.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {8}});
  });
  EXPECT_NO_THROW(HfModel::open(dir));  // derivable, ignored
}

TEST(HfModel, RefusesIndexEntriesOutsideTheDirectory) {
  SynthOptions opt;
  opt.shard_gb = 0.0001;
  fs::path dir = synth("evil_index", opt);
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"weight_map":{"model.norm.weight":"../../etc/passwd"}})";
  expect_open_error(dir, {"outside the model directory"});
}

// The file a mapping of this process holding `p` maps ("" when none does or it is anonymous).
std::string mapped_path_of(const void* p) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    uintptr_t begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &begin, &end) != 2 || at < begin || at >= end)
      continue;
    const size_t slash = line.find('/');
    return slash == std::string::npos ? "" : line.substr(slash);
  }
  return "";
}

// Issue 21: every worker copied a 100 MB tokenizer.json into its own memory at open. The text
// is now the file's own pages, shared with the page cache and every other worker.
TEST(HfModel, MapsTokenizerJsonInsteadOfCopyingIt) {
  const fs::path dir = synth("mapped_tokenizer");
  const HfModel m = HfModel::open(dir);
  ASSERT_FALSE(m.tokenizer_json().empty());
  EXPECT_EQ(mapped_path_of(m.tokenizer_json().data()),
            fs::canonical(dir / "tokenizer.json").string());
  std::ifstream file(dir / "tokenizer.json", std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  EXPECT_EQ(m.tokenizer_json(), text.str());
}

// Issue 21: a worker also checked all of tokenizer.json's UTF-8 and nesting at every open, even
// when it then opened the tokenizer's image; those checks are the parser's, run when an image is
// built. The server, which shares the file, still checks at load.
TEST(HfModel, AWorkersOpenLeavesTokenizerJsonToTheTokenizer) {
  const fs::path dir = synth("unchecked_tokenizer");
  for (const std::string& text :
       {std::string("{\"model\": \"caf\xe9\"}"), std::string(100000, '[')}) {
    std::ofstream(dir / "tokenizer.json", std::ios::binary | std::ios::trunc) << text;
    expect_open_error(dir, {"tokenizer.json"});
    HfOpenOptions worker;
    worker.check_tokenizer_json = false;
    EXPECT_EQ(HfModel::open(dir, worker).tokenizer_json(), text);
  }
}

TEST(HfModel, EosIdsPreferGenerationConfig) {
  ModelConfig c;
  c.vocab = 16;
  c.eos_ids = {2};
  EXPECT_EQ(eos_token_ids(c, ""), std::vector<int>{2});
  EXPECT_EQ(eos_token_ids(c, R"({"eos_token_id":[7,9]})"), (std::vector<int>{7, 9}));
  EXPECT_EQ(eos_token_ids(c, R"({"eos_token_id":5})"), std::vector<int>{5});
  EXPECT_EQ(eos_token_ids(c, R"({"eos_token_id":null})"), std::vector<int>{2});
}

// Issue 21: generation_config.json's ids were dropped when not integers and taken when out of
// range, so a model could load with an end-of-sequence id it can never produce.
TEST(HfModel, GenerationConfigIdsMustBeWithinTheVocabulary) {
  ModelConfig c;
  c.vocab = 16;
  EXPECT_THROW(eos_token_ids(c, R"({"eos_token_id":[99999999999,-5]})"), std::runtime_error);
  const fs::path dir = synth("generation_ids");
  const int vocab = HfModel::open(dir).config().vocab;
  const std::string bound = "from 0 to " + std::to_string(vocab - 1);
  std::ofstream(dir / "generation_config.json", std::ios::trunc)
      << R"({"eos_token_id": [99999999999, -5]})";
  expect_open_error(dir, {"generation_config.json", "eos_token_id 99999999999", bound});
  std::ofstream(dir / "generation_config.json", std::ios::trunc) << R"({"bos_token_id": "x"})";
  expect_open_error(dir, {"generation_config.json", "bos_token_id must be a token id", bound});
  std::ofstream(dir / "generation_config.json", std::ios::trunc) << R"({"eos_token_id": 3})";
  EXPECT_NO_THROW(HfModel::open(dir));
}

// Issue 21: a tensor missing from a header, its bytes left in place, read as "gap of 128
// unaccounted bytes": the names are matched against the config before the bytes are counted.
TEST(HfModel, ATensorMissingFromTheHeaderIsNamedNotCountedAsAGap) {
  const fs::path dir = synth("header_without_norm");
  const fs::path file = dir / "model.safetensors";
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | uint8_t(bytes[size_t(i)]);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, header_len));
  for (const char* name : {"model.layers.0.input_layernorm.weight", "model.norm.weight"}) {
    nlohmann::json edited = header;
    ASSERT_EQ(edited.erase(name), 1u) << name;
    std::string text = edited.dump();
    text.resize(header_len, ' ');  // same length: the data and its offsets stay where they were
    std::ofstream(file, std::ios::binary | std::ios::trunc)
        << bytes.substr(0, 8) << text << bytes.substr(8 + header_len);
    expect_open_error(dir, {std::string("missing tensor '") + name + "'"});
  }
}

}  // namespace
}  // namespace hearth
