// A server quantizing at load (issue 25, --quantize fp8, memfd backend) lists in its manifest the
// dtypes, shapes and checksums of the fp8 checkpoint hearth-synth --dtype fp8 writes for the same
// weights, so --verify-weights and the proof harness's weights digest see the same bytes; an
// fp8 checkpoint is served as it is.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include <nlohmann/json.hpp>

#include "tests/support/temp_dir.h"
#include "tools/synth_model.h"
#include "weight-server/daemon/served_model.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/sharing/checksum.h"
#include "weight-server/sharing/manifest.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

fs::path synth(const std::string& name, bool fp8) {
  fs::path dir = test::process_scratch_dir() / ("served_fp8_" + name);
  fs::remove_all(dir);
  SynthOptions opt;
  opt.preset = "tiny-qwen2";  // biases too: they stay 16-bit
  opt.seed = 5;
  opt.fp8 = fp8;
  write_synthetic_model(dir, opt);
  return dir;
}

// The manifest's tensors equal the offline checkpoint's: names, dtypes, shapes, checksums.
void expect_manifest_of(const Manifest& m, const HfModel& offline) {
  EXPECT_EQ(m.config.quantization, kFp8PerChannel);
  ASSERT_EQ(m.tensors.size(), offline.tensors().size());
  for (const ManifestTensor& t : m.tensors) {
    const HfTensor* want = offline.find(t.info.name);
    ASSERT_NE(want, nullptr) << t.info.name;
    EXPECT_EQ(t.info.dtype, want->info.dtype) << t.info.name;
    EXPECT_EQ(t.info.shape, want->info.shape) << t.info.name;
    EXPECT_EQ(t.xxh3, xxh3_checksum(want->data)) << t.info.name;
  }
}

TEST(ServedFp8, QuantizeAtLoadServesTheOfflineCheckpointsBytes) {
  const HfModel offline = HfModel::open(synth("offline", true));
  ServeOptions options;
  options.backend = "memfd";
  options.threads = 2;
  options.quantize_fp8 = true;
  const auto served = load_served_model({synth("bf16", false), "m"}, options);
  const Manifest m = parse_manifest(served->manifest);
  expect_manifest_of(m, offline);
  int fp8 = 0;
  for (const ManifestTensor& t : m.tensors) fp8 += t.info.dtype == DType::F8_E4M3;
  EXPECT_EQ(fp8, 7 * m.config.n_layers);
  // The bytes workers map are those checksums' bytes.
  for (const StoredTensor& t : served->store->tensors()) {
    const HfTensor* want = offline.find(t.info.name);
    ASSERT_NE(want, nullptr);
    EXPECT_EQ(xxh3_checksum({static_cast<const std::byte*>(t.data), t.info.bytes}),
              xxh3_checksum(want->data))
        << t.info.name;
  }
}

TEST(ServedFp8, AnFp8CheckpointIsServedAsItIs) {
  const fs::path dir = synth("as_is", true);
  ServeOptions options;
  options.backend = "memfd";
  options.quantize_fp8 = true;  // nothing left to quantize
  const auto served = load_served_model({dir, "m"}, options);
  expect_manifest_of(parse_manifest(served->manifest), HfModel::open(dir));
}

// A worker refuses a manifest whose fp8 tensors disagree with its architecture, naming them.
TEST(ServedFp8, AManifestWhoseDtypesDisagreeIsRefused) {
  using json = nlohmann::json;
  ServeOptions options;
  options.backend = "memfd";
  options.quantize_fp8 = true;
  const auto served = load_served_model({synth("tamper", false), "m"}, options);
  // Sets tensor `name`'s dtype to `dtype`, its bytes to match.
  const auto retype = [](json& j, const std::string& name, const std::string& dtype) {
    for (json& t : j["tensors"])
      if (t["name"] == name) {
        uint64_t n = dtype == "F32" ? 4 : dtype == "F8_E4M3" ? 1 : 2;
        for (const json& d : t["shape"]) n *= d.get<uint64_t>();
        t["dtype"] = dtype;
        t["bytes"] = n;
        t["allocation_bytes"] = std::max(n, t["allocation_bytes"].get<uint64_t>());
      }
  };
  const std::string proj = "model.layers.1.mlp.up_proj.weight";
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& j) { j["architecture"].erase("quantization_config"); },
       "tensor 'model.layers.0.self_attn.q_proj.weight' is F8_E4M3; only the decoder projections"},
      {[&](json& j) { retype(j, proj, "BF16"); }, "tensor '" + proj + "' is BF16"},
      {[&](json& j) { retype(j, proj + "_scale", "F8_E4M3"); },
       "tensor '" + proj + "_scale' is F8_E4M3; a weight scale must be F32, F16 or BF16"},
      {[&](json& j) {
         json kept = json::array();
         for (const json& t : j["tensors"])
           if (t["name"] != proj + "_scale") kept.push_back(t);
         j["tensors"] = kept;
       },
       "missing tensor '" + proj + "_scale'"},
      {[](json& j) {
         j["architecture"]["quantization_config"]["config_groups"]["group_0"]["weights"]
          ["strategy"] = "tensor";
       },
       "tensor 'model.layers.0.self_attn.q_proj.weight_scale' has shape [64, 1], the "
       "architecture implies [1]"},
  };
  for (const auto& [edit, expect] : cases) {
    json j = served->manifest;
    edit(j);
    try {
      parse_manifest(j);
      ADD_FAILURE() << expect << ": accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace hearth
