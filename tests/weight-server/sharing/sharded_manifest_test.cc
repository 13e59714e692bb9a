// A model sharded for tensor parallelism (issue 26) as the server builds it and workers read it:
// every rank's piece of every tensor in its own sealed memfd, the manifest listing them per rank
// with their slices, each piece byte-equal to its slice of the source; a hostile sharded manifest
// (a rank missing, out of range or listed twice, a slice overlapping or shaped otherwise) refused
// with a message naming what is wrong; the unsharded manifest unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "tests/ipc/test_util.h"
#include "tests/support/error_of.h"
#include "tests/weight-server/sharing/manifest_tamper.h"
#include "tools/synth_model.h"
#include "weight-server/daemon/served_model.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/sharing/checksum.h"
#include "weight-server/sharing/manifest.h"
#include "weight-server/sharing/model_import.h"
#include "weight-server/sharing/vmm_backend.h"

namespace hearth {
namespace {

using json = nlohmann::json;

std::unique_ptr<ServedModel> load(const std::string& dir, int tensor_parallel,
                                  const std::string& backend = "memfd") {
  ServeOptions options;
  options.backend = backend;
  options.tensor_parallel = tensor_parallel;
  return load_served_model({dir, "tiny"}, options);
}

SynthOptions preset_options(const std::string& preset) {
  SynthOptions options;
  options.preset = preset;
  return options;
}

using test::error_of;

// The manifest of `options`' model served with tensor_parallel 2.
json sharded_manifest(const SynthOptions& options) {
  test::TempDir dir;
  write_synthetic_model(dir.path(), options);
  return load(dir.path(), 2)->manifest;
}

// Rank `rank`'s piece of the tensor `name` in the manifest `m`.
json& piece(json& m, int rank, const std::string& name) {
  for (json& t : m["ranks"][rank]["tensors"])
    if (t["name"] == name) return t;
  throw std::logic_error(name);
}

TEST(ShardedManifest, EveryArchitectureShardsIntoItsPlan) {
  for (const char* preset : {"tiny-llama", "tiny-mistral", "tiny-qwen2", "tiny-qwen3"}) {
    SCOPED_TRACE(preset);
    test::TempDir dir;
    write_synthetic_model(dir.path(), preset_options(preset));
    const HfModel source = HfModel::open(dir.path());
    const auto served = load(dir.path(), 2);
    EXPECT_EQ(served->manifest["version"], kShardedManifestVersion);
    EXPECT_FALSE(served->manifest.contains("tensors"));
    const Manifest m = parse_manifest(served->manifest);
    EXPECT_EQ(manifest_to_json(m), served->manifest);
    ASSERT_EQ(m.tensor_parallel, 2);
    EXPECT_EQ(m.devices, (std::vector<int>{-1, -1}));
    const ShardPlan plan = ShardPlan::make(source.config(), 2);
    // One allocation per piece, rank 0's first; each piece holds exactly its slice's bytes.
    ASSERT_EQ(m.tensors.size(), 2 * source.tensors().size());
    ASSERT_EQ(served->store->allocation_count(), m.tensors.size());
    for (int r = 0; r < 2; ++r) {
      const Manifest view = m.rank_view(r);
      ASSERT_EQ(view.tensors.size(), plan.tensors(r).size());
      for (size_t i = 0; i < view.tensors.size(); ++i) {
        const ManifestTensor& t = view.tensors[i];
        const TensorShard& want = plan.tensors(r)[i];
        ASSERT_EQ(t.info.name, want.name);
        EXPECT_EQ(t.rank, r);
        EXPECT_EQ(t.slice, want.slice);
        EXPECT_EQ(t.info.shape, want.shape);
        const HfTensor& full = *source.find(want.name);
        std::vector<std::byte> piece(shard_bytes(want, dtype_size(full.info.dtype)));
        copy_shard(want, dtype_size(full.info.dtype), full.data, piece);
        EXPECT_EQ(t.xxh3, xxh3_checksum(piece)) << t.info.name;
        const StoredTensor& stored = served->store->tensors()[t.allocation];
        ASSERT_EQ(stored.info.bytes, piece.size());
        EXPECT_EQ(std::memcmp(stored.data, piece.data(), piece.size()), 0) << t.info.name;
      }
    }
    const json summary = served->summary();
    EXPECT_EQ(summary["tensor_parallel"], 2);
    ASSERT_EQ(summary["ranks"].size(), 2u);
    EXPECT_EQ(summary["ranks"][1]["tensors"], source.tensors().size());
    EXPECT_TRUE(summary["ranks"][1]["device"].is_null());
  }
}

TEST(ShardedManifest, UnshardedManifestIsUnchanged) {
  test::TempDir dir;
  write_synthetic_model(dir.path(), SynthOptions{});
  const auto served = load(dir.path(), 1);
  EXPECT_EQ(served->manifest["version"], kManifestVersion);
  std::vector<std::string> keys;
  for (const auto& [key, _] : served->manifest.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"allocation_bytes", "architecture", "backend", "files",
                                            "format", "gpu_uuid", "model", "tensor_bytes",
                                            "tensors", "version"}));
  for (const json& t : served->manifest["tensors"]) EXPECT_FALSE(t.contains("slice"));
  EXPECT_FALSE(served->summary().contains("tensor_parallel"));
  const Manifest m = parse_manifest(served->manifest);
  EXPECT_FALSE(m.sharded());
  EXPECT_NE(error_of([&] { manifest_for_rank(m, 0); }).find("is not sharded"), std::string::npos);
  EXPECT_EQ(manifest_for_rank(m, std::nullopt).tensors.size(), m.tensors.size());
}

TEST(ShardedManifest, LoadRefusesWhatItCannotShard) {
  test::TempDir dir;
  write_synthetic_model(dir.path(), SynthOptions{});  // 2 kv heads
  EXPECT_NE(error_of([&] { load(dir.path(), 4); }).find("num_key_value_heads 2 is not a multiple"),
            std::string::npos);
  // vmm ranks need a GPU each: one more rank than this machine has GPUs is refused first.
  const int ranks = std::max(2, vmm_device_count() + 1);
  const std::string error = error_of([&] { load(dir.path(), ranks, "vmm"); });
  EXPECT_NE(error.find("needs " + std::to_string(ranks) + " GPUs (one per rank)"),
            std::string::npos);
}

TEST(ShardedManifest, RefusesHostileShardedManifests) {
  const json good = sharded_manifest(preset_options("tiny-qwen2"));
  ASSERT_NO_THROW(parse_manifest(good));
  const std::string k = "model.layers.1.self_attn.k_proj.weight";
  const std::vector<test::ManifestTamper> cases = {
      {"a rank missing", [](json& m) { m["ranks"].erase(1); }, "rank 1: missing"},
      {"a rank out of range", [](json& m) { m["ranks"][1]["rank"] = 2; },
       "rank 2 is out of range (tensor_parallel 2 has ranks 0..1)"},
      {"a rank twice", [](json& m) { m["ranks"][1]["rank"] = 0; }, "rank 0 is listed twice"},
      {"a shard missing",
       [&](json& m) { m["ranks"][0]["tensors"].erase(m["ranks"][0]["tensors"].size() - 1); },
       "rank 0: missing its shard of tensor 'model.norm.weight'"},
      {"overlapping slices", [&](json& m) { piece(m, 1, k)["slice"] = piece(m, 0, k)["slice"]; },
       "holds rows [0, 16), but rank 1 of 2 holds rows [16, 32)"},
      {"a slice cut the wrong way", [&](json& m) { piece(m, 1, k)["slice"]["split"] = "columns"; },
       "holds columns [16, 32)"},
      {"a wrong-shaped piece",
       [&](json& m) {
         json& t = piece(m, 1, k);
         t["shape"] = {8, 64};
         t["bytes"] = 8 * 64 * 2;
       },
       "has shape [8, 64], its slice implies [16, 64]"},
      {"an unknown split", [&](json& m) { piece(m, 0, k)["slice"]["split"] = "diagonal"; },
       "unknown split 'diagonal'"},
      {"a slice missing", [&](json& m) { piece(m, 0, k).erase("slice"); }, "has no 'slice'"},
      {"a device on memfd", [](json& m) { m["ranks"][0]["device"] = 0; },
       "'device' must be null for the memfd backend"},
      {"an allocation shared by ranks",
       [&](json& m) { piece(m, 1, k)["allocation"] = piece(m, 0, k)["allocation"]; },
       "is used by two tensors"},
      {"a degree that does not divide", [](json& m) { m["tensor_parallel"] = 3; },
       "num_key_value_heads 2 is not a multiple of 3"},
      {"tensor_parallel 1", [](json& m) { m["tensor_parallel"] = 1; },
       "'tensor_parallel' must be an integer in 2..64"},
      {"an unsharded version", [](json& m) { m["version"] = kManifestVersion; },
       "has no 'tensors'"},
  };
  test::expect_tampers_refused(good, cases);
  const Manifest m = parse_manifest(good);
  EXPECT_NE(
      error_of([&] { manifest_for_rank(m, std::nullopt); }).find("import it as one of its ranks"),
      std::string::npos);
  EXPECT_NE(error_of([&] { manifest_for_rank(m, 2); }).find("rank 2 is not in 0..1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { manifest_for_rank(m, -1); }).find("rank -1 is not in 0..1"),
            std::string::npos);
}

// fp8 (issue 25): scale pieces are checked against the plan as weights are: an o_proj scale cut
// like a q_proj one (the plan keeps it whole), a q_proj scale left whole (the plan cuts it), or
// a scale piece in fp8 is refused, naming the tensor.
TEST(ShardedManifest, RefusesFp8ScalesCutOtherwiseThanThePlan) {
  SynthOptions options = preset_options("tiny-qwen2");
  options.fp8 = true;
  const json good = sharded_manifest(options);
  ASSERT_NO_THROW(parse_manifest(good));
  const std::string o = "model.layers.1.self_attn.o_proj.weight_scale";
  const std::string q = "model.layers.1.self_attn.q_proj.weight_scale";
  const std::vector<test::ManifestTamper> cases = {
      {"o's scales cut by rows",
       [&](json& m) {
         json& t = piece(m, 1, o);
         const int64_t rows = t["shape"][0].get<int64_t>();
         t["shape"] = {rows / 2, 1};
         t["bytes"] = rows / 2 * 4;
         t["slice"] = {{"split", "rows"}, {"begin", rows / 2}, {"end", rows}};
       },
       "tensor '" + o + "' holds rows [32, 64), but rank 1 of 2 holds replicated [0, 64)"},
      {"q's scales whole",
       [&](json& m) {
         json& t = piece(m, 1, q);
         const int64_t rows = t["shape"][0].get<int64_t>() * 2;
         t["shape"] = {rows, 1};
         t["bytes"] = rows * 4;
         t["allocation_bytes"] = std::max<int64_t>(rows * 4, t["allocation_bytes"].get<int64_t>());
         t["slice"] = {{"split", "replicated"}, {"begin", 0}, {"end", rows}};
       },
       "tensor '" + q + "' holds replicated [0, 64), but rank 1 of 2 holds rows [32, 64)"},
      {"a scale in fp8",
       [&](json& m) {
         json& t = piece(m, 0, q);
         t["dtype"] = "F8_E4M3";
         t["bytes"] = t["bytes"].get<int64_t>() / 4;
       },
       "tensor '" + q + "' is F8_E4M3; a weight scale must be F32, F16 or BF16"},
      {"a projection piece in bf16",
       [&](json& m) {
         json& t = piece(m, 1, "model.layers.0.mlp.down_proj.weight");
         t["dtype"] = "BF16";
         t["bytes"] = t["bytes"].get<int64_t>() * 2;
         t["allocation_bytes"] =
             std::max(t["bytes"].get<int64_t>(), t["allocation_bytes"].get<int64_t>());
       },
       "tensor 'model.layers.0.mlp.down_proj.weight' is BF16, but quantization_config makes"},
  };
  test::expect_tampers_refused(good, cases);
}

}  // namespace
}  // namespace hearth
