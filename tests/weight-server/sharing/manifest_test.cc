// The manifest as workers receive it: what the server builds must parse back unchanged, and
// every way of tampering with it (version, backend, tensor list, shapes, sizes, ids, checksums)
// must be refused with a message that names what is wrong.
#include <gtest/gtest.h>

#include <functional>

#include "tests/ipc/test_util.h"
#include "tools/synth_model.h"
#include "weight-server/sharing/checksum.h"
#include "weight-server/sharing/manifest.h"
#include "weight-server/daemon/model_spec.h"
#include "weight-server/daemon/served_model.h"
#include "base/read_file.h"

namespace hearth {
namespace {

using json = nlohmann::json;

class ManifestTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir;
    write_synthetic_model(dir_->path(), SynthOptions{});
    ServeOptions options;
    options.backend = "memfd";
    served_ = load_served_model({dir_->path(), "tiny"}, options).release();
  }
  static void TearDownTestSuite() {
    delete served_;
    delete dir_;
  }
  static json manifest() { return served_->manifest; }

  static inline test::TempDir* dir_ = nullptr;
  static inline ServedModel* served_ = nullptr;
};

TEST_F(ManifestTest, RoundTripsWhatTheServerBuilds) {
  const Manifest m = parse_manifest(manifest());
  EXPECT_EQ(m.model, "tiny");
  EXPECT_EQ(m.backend, "memfd");
  EXPECT_EQ(m.gpu_uuid, "");
  EXPECT_EQ(m.config.hidden, served_->store->config().hidden);
  // The files travel as memfds beside the manifest; it names them by size and checksum.
  const std::string tokenizer = read_file(std::string(dir_->path()) + "/tokenizer.json");
  const ManifestFile* file = m.file("tokenizer.json");
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->bytes, tokenizer.size());
  EXPECT_EQ(file->xxh3,
            xxh3_checksum(std::as_bytes(std::span(tokenizer.data(), tokenizer.size()))));
  EXPECT_EQ(manifest().dump().find("merges"), std::string::npos) << "tokenizer.json inline";
  ASSERT_NE(m.file("tokenizer.image"), nullptr);
  ASSERT_NE(m.file("generation_config.json"), nullptr);
  ASSERT_EQ(m.files.size(), served_->files.memfds.size());
  for (size_t i = 0; i < m.files.size(); ++i) {
    EXPECT_EQ(m.files[i].fd, i);
    EXPECT_EQ(m.files[i].bytes, served_->files.memfds[i].size()) << m.files[i].name;
  }
  ASSERT_EQ(m.tensors.size(), served_->store->tensors().size());
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const StoredTensor& t = served_->store->tensors()[i];
    EXPECT_EQ(m.tensors[i].info.name, t.info.name);
    EXPECT_EQ(m.tensors[i].info.shape, t.info.shape);
    EXPECT_EQ(m.tensors[i].allocation, t.alloc_id);
    EXPECT_EQ(m.tensors[i].xxh3,
              xxh3_checksum({static_cast<const std::byte*>(t.data), t.info.bytes}));
  }
  EXPECT_EQ(manifest_to_json(m), manifest());
  EXPECT_EQ(manifest()["version"], kManifestVersion);
}

struct Tamper {
  const char* what;
  std::function<void(json&)> edit;
  const char* expect;  // in the error message
};

TEST_F(ManifestTest, RefusesTamperedManifests) {
  const std::vector<Tamper> cases = {
      {"newer version", [](json& j) { j["version"] = 4; }, "version 4 is not supported"},
      {"version 1 (files inline)", [](json& j) { j["version"] = 1; }, "version 1 is not supported"},
      {"other format", [](json& j) { j["format"] = "gguf"; }, "'format'"},
      {"unknown backend", [](json& j) { j["backend"] = "rdma"; }, "unknown backend 'rdma'"},
      {"vmm without a GPU", [](json& j) { j["backend"] = "vmm"; }, "needs the GPU's 'gpu_uuid'"},
      {"memfd with a GPU", [](json& j) { j["gpu_uuid"] = "GPU-1"; }, "must be null"},
      {"architecture not an object", [](json& j) { j["architecture"] = "llama"; },
       "'architecture' is not an object"},
      {"no tensors field", [](json& j) { j.erase("tensors"); }, "has no 'tensors'"},
      {"missing tensor", [](json& j) { j["tensors"].erase(j["tensors"].begin() + 1); },
       "missing tensor"},
      {"extra tensor",
       [](json& j) {
         json t = j["tensors"][1];
         t["name"] = "model.layers.0.extra.weight";
         t["allocation"] = 100000;
         j["tensors"].push_back(t);
       },
       "unexpected tensor 'model.layers.0.extra.weight'"},
      {"duplicate tensor",
       [](json& j) {
         json t = j["tensors"][1];
         t["allocation"] = 100000;
         j["tensors"].push_back(t);
       },
       "appears twice"},
      {"reshaped tensor",
       [](json& j) {
         json& t = j["tensors"][0];  // the embedding: [vocab, hidden] -> [vocab / 2, hidden * 2]
         t["shape"] = {t["shape"][0].get<int64_t>() / 2, t["shape"][1].get<int64_t>() * 2};
       },
       "the architecture implies"},
      {"architecture edited", [](json& j) { j["architecture"]["hidden_size"] = 128; },
       "the architecture implies"},
      {"bytes disagree with the shape", [](json& j) { j["tensors"][0]["bytes"] = 12; },
       "'bytes' is 12"},
      {"allocation too small",
       [](json& j) {
         j["tensors"][0]["allocation_bytes"] = j["tensors"][0]["bytes"].get<uint64_t>() - 1;
       },
       "cannot hold"},
      {"shared allocation",
       [](json& j) { j["tensors"][2]["allocation"] = j["tensors"][1]["allocation"]; },
       "used by two tensors"},
      {"bad checksum", [](json& j) { j["tensors"][0]["xxh3"] = "xyz"; },
       "not 16 lower-case hex digits"},
      {"bad dtype", [](json& j) { j["tensors"][0]["dtype"] = "I8"; }, "unsupported dtype 'I8'"},
      // Issue 21: wrong types are named as what they are.
      {"dtype a number", [](json& j) { j["tensors"][0]["dtype"] = 5; },
       "'dtype' must be a string, got number 5"},
      {"shape a string", [](json& j) { j["tensors"][0]["shape"] = "64"; },
       "'shape' must be an array of at most 8 sizes, got string \"64\""},
      {"bytes a string", [](json& j) { j["tensors"][0]["bytes"] = "12"; },
       "'bytes' must be a non-negative integer, got string \"12\""},
      {"negative size",
       [](json& j) {
         j["tensors"][0]["shape"] = {-4, 64};
       },
       "not a positive size"},
      {"overflowing shape",
       [](json& j) {
         j["tensors"][0]["shape"] = {int64_t{1} << 40, int64_t{1} << 40};
       },
       "overflows"},
      {"allocation id not a number", [](json& j) { j["tensors"][0]["allocation"] = "0"; },
       "'allocation'"},
      {"tensor not an object", [](json& j) { j["tensors"][0] = 7; }, "tensors[0]: not an object"},
      {"file entry not an object", [](json& j) { j["files"]["tokenizer.json"] = "{}"; },
       "files['tokenizer.json']: not an object or null"},
      {"unknown file", [](json& j) { j["files"]["vocab.txt"] = nullptr; },
       "unknown file 'vocab.txt'"},
      {"empty file", [](json& j) { j["files"]["tokenizer.json"]["bytes"] = 0; },
       "'bytes' 0 is not in 1.."},
      {"file checksum", [](json& j) { j["files"]["tokenizer.json"]["xxh3"] = "0x12"; },
       "files['tokenizer.json']: 'xxh3' is '0x12'"},
      {"descriptor used twice",
       [](json& j) { j["files"]["tokenizer.image"]["fd"] = j["files"]["tokenizer.json"]["fd"]; },
       "is used twice"},
      {"descriptor index gap", [](json& j) { j["files"]["tokenizer.json"] = nullptr; },
       "leaves a gap"},
      {"descriptor index out of range", [](json& j) { j["files"]["tokenizer.json"]["fd"] = 9; },
       "'fd' 9 is out of range"},
  };
  for (const Tamper& c : cases) {
    json j = manifest();
    c.edit(j);
    try {
      parse_manifest(j);
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos)
          << c.what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("manifest of model 'tiny'"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(parse_manifest(json::array()), std::runtime_error);
}

TEST(Checksum, HexRoundTripAndStrictness) {
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}, uint64_t{0x0123456789abcdef}}) {
    EXPECT_EQ(checksum_to_hex(v).size(), 16u);
    EXPECT_EQ(checksum_from_hex(checksum_to_hex(v)), v);
  }
  EXPECT_FALSE(checksum_from_hex("0123456789ABCDEF"));  // one spelling only
  EXPECT_FALSE(checksum_from_hex("0123456789abcde"));
  EXPECT_FALSE(checksum_from_hex("0123456789abcdeg"));
}

TEST(Checksum, AsStoredMatchesTheGpuRounding) {
  std::vector<float> f(100'003);
  for (size_t i = 0; i < f.size(); ++i) f[i] = float(i) * 0.37f - 1234.5f + 1.0f / float(i + 1);
  std::vector<uint16_t> bf(f.size());
  for (size_t i = 0; i < f.size(); ++i) bf[i] = f32_to_bf16(f[i]);
  const auto src = std::as_bytes(std::span(f));
  EXPECT_EQ(xxh3_checksum_as_stored(src, DType::F32, DType::BF16),
            xxh3_checksum(std::as_bytes(std::span(bf))));
  EXPECT_EQ(xxh3_checksum_as_stored(src, DType::F32, DType::F32), xxh3_checksum(src));
  EXPECT_THROW(xxh3_checksum_as_stored(src, DType::BF16, DType::F32), std::runtime_error);
}

TEST(ModelSpec, ParsesDirAndName) {
  EXPECT_EQ(parse_model_spec("/models/llama").name, "llama");
  EXPECT_EQ(parse_model_spec("/models/llama/").name, "llama");
  const ModelSpec named = parse_model_spec("/models/llama:fast");
  EXPECT_EQ(named.dir, "/models/llama");
  EXPECT_EQ(named.name, "fast");
  const ModelSpec colon_in_dir = parse_model_spec("/data/a:b/llama");
  EXPECT_EQ(colon_in_dir.dir, "/data/a:b/llama");
  EXPECT_EQ(colon_in_dir.name, "llama");
  EXPECT_THROW(parse_model_spec("/models/llama:"), std::runtime_error);
  EXPECT_THROW(parse_model_spec("/models/llama:has space"), std::runtime_error);
  EXPECT_THROW(parse_model_spec(":name"), std::runtime_error);
  EXPECT_THROW(parse_model_spec("/models/llama:.hidden"), std::runtime_error);
  EXPECT_FALSE(valid_model_name(std::string(129, 'a')));
  EXPECT_TRUE(valid_model_name("Llama-3.1-8B_instruct"));
}

}  // namespace
}  // namespace hearth
