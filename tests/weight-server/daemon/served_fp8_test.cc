// A server quantizing at load (issue 25, --quantize fp8, memfd backend) lists in its manifest the
// dtypes, shapes and checksums of the fp8 checkpoint hearth-synth --dtype fp8 writes for the same
// weights, so --verify-weights and the proof harness's weights digest see the same bytes; an
// fp8 checkpoint is served as it is.
#include <gtest/gtest.h>

#include <filesystem>

#include "tools/synth_model.h"
#include "weight-server/daemon/served_model.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/sharing/checksum.h"
#include "weight-server/sharing/manifest.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

fs::path synth(const std::string& name, bool fp8) {
  fs::path dir = fs::path(testing::TempDir()) / ("served_fp8_" + name);
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

}  // namespace
}  // namespace hearth
