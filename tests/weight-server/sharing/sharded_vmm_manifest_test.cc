// A sharded manifest of the vmm backend (issue 26): each rank's device recorded by index and
// UUID, read back as written, a rank's view carrying its own GPU's UUID (what a worker finds
// its device by); hostile device fields refused, naming the rank. The manifests here are the
// server's memfd manifest turned into a vmm one, so no GPU is needed.
#include <gtest/gtest.h>

#include <functional>

#include "tests/ipc/test_util.h"
#include "tests/support/error_of.h"
#include "tests/weight-server/sharing/manifest_tamper.h"
#include "tools/synth_model.h"
#include "weight-server/daemon/served_model.h"
#include "weight-server/sharing/manifest.h"
#include "weight-server/sharing/model_import.h"

namespace hearth {
namespace {

using json = nlohmann::json;

const std::string kGpu0 = "GPU-00000000-1111-2222-3333-444444444444";
const std::string kGpu1 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

using test::error_of;

// The TP=2 manifest of a tiny model, as a vmm server on devices 3 and 1 would write it.
json vmm_manifest(const std::string& dir) {
  write_synthetic_model(dir, SynthOptions{});
  ServeOptions options;
  options.tensor_parallel = 2;
  json m = load_served_model({dir, "tiny"}, options)->manifest;
  m["backend"] = "vmm";
  m["gpu_uuid"] = kGpu0;
  m["ranks"][0]["device"] = 3;
  m["ranks"][0]["gpu_uuid"] = kGpu0;
  m["ranks"][1]["device"] = 1;
  m["ranks"][1]["gpu_uuid"] = kGpu1;
  return m;
}

TEST(ShardedVmmManifest, DevicesRoundTrip) {
  test::TempDir dir;
  const json j = vmm_manifest(dir.path());
  const Manifest m = parse_manifest(j);
  EXPECT_EQ(m.devices, (std::vector<int>{3, 1}));
  EXPECT_EQ(m.device_uuids, (std::vector<std::string>{kGpu0, kGpu1}));
  EXPECT_EQ(m.gpu_uuid, kGpu0);
  EXPECT_EQ(manifest_to_json(m), j);
  // A worker on rank 1 looks for rank 1's GPU, by UUID.
  EXPECT_EQ(manifest_for_rank(m, 1).gpu_uuid, kGpu1);
  EXPECT_EQ(manifest_for_rank(m, 0).gpu_uuid, kGpu0);
}

TEST(ShardedVmmManifest, RefusesHostileDevices) {
  test::TempDir dir;
  const json good = vmm_manifest(dir.path());
  const std::vector<test::ManifestTamper> cases = {
      {"a negative device", [](json& m) { m["ranks"][1]["device"] = -1; },
       "rank 1: 'device' must be a CUDA device index 0..1023, got number -1"},
      {"a device out of range", [](json& m) { m["ranks"][1]["device"] = 1024; },
       "rank 1: 'device' must be a CUDA device index 0..1023, got number 1024"},
      {"a device that is no number", [](json& m) { m["ranks"][0]["device"] = "0"; },
       "rank 0: 'device' must be a CUDA device index"},
      {"a null device", [](json& m) { m["ranks"][0]["device"] = nullptr; },
       "rank 0: 'device' must be a CUDA device index"},
      {"two ranks on one device", [](json& m) { m["ranks"][1]["device"] = 3; },
       "rank 1: device 3 is rank 0's too (one GPU per rank)"},
      {"two ranks on one GPU by UUID", [](json& m) { m["ranks"][1]["gpu_uuid"] = kGpu0; },
       "rank 1: GPU GPU-00000000-1111-2222-3333-444444444444 is rank 0's too"},
      {"a top-level UUID that is not rank 0's", [](json& m) { m["gpu_uuid"] = kGpu1; },
       "'gpu_uuid' GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee is not rank 0's GPU"},
      {"a rank without its UUID", [](json& m) { m["ranks"][1].erase("gpu_uuid"); },
       "rank 1: has no 'gpu_uuid'"},
      {"a UUID that is no UUID", [](json& m) { m["ranks"][1]["gpu_uuid"] = "GPU-1\n2"; },
       "is not a device UUID"},
      {"a UUID that is too long",
       [](json& m) { m["ranks"][1]["gpu_uuid"] = "GPU-" + std::string(100, 'a'); },
       "is not a device UUID"},
      {"a UUID that is a number", [](json& m) { m["ranks"][1]["gpu_uuid"] = 7; },
       "rank 1: 'gpu_uuid' must be the device's UUID, got number 7"},
  };
  test::expect_tampers_refused(good, cases);
}

TEST(ShardedVmmManifest, MemfdRanksHaveNoGpu) {
  test::TempDir dir;
  json m = vmm_manifest(dir.path());
  m["backend"] = "memfd";
  m["gpu_uuid"] = nullptr;
  m["ranks"][0]["device"] = nullptr;
  m["ranks"][1]["device"] = nullptr;
  EXPECT_NE(error_of([&] {
              parse_manifest(m);
            }).find("rank 0: 'gpu_uuid' must be null or absent for the memfd backend"),
            std::string::npos);
  m["ranks"][0].erase("gpu_uuid");
  m["ranks"][1]["gpu_uuid"] = nullptr;
  const Manifest parsed = parse_manifest(m);
  EXPECT_EQ(parsed.devices, (std::vector<int>{-1, -1}));
  EXPECT_EQ(manifest_for_rank(parsed, 1).gpu_uuid, "");
}

// A worker importing every rank finds each rank's GPU by UUID before it takes a descriptor;
// a GPU it cannot see is named with its rank (here: no GPU at all, or not these UUIDs).
TEST(ShardedVmmManifest, ImportNamesTheRankWhoseGpuIsMissing) {
  test::TempDir dir;
  const Manifest m = parse_manifest(vmm_manifest(dir.path()));
  const std::string error = error_of([&] { vmm_devices_for_ranks(m); });
  EXPECT_NE(error.find("model 'tiny', rank 0: "), std::string::npos) << error;
}

}  // namespace
}  // namespace hearth
