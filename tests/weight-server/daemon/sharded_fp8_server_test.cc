// hearth-server --tensor-parallel 2 --quantize fp8 as a real process (issues 25 and 26, memfd
// backend): the model is quantized once, whole, then cut, so every rank's pieces are the TP=1
// fp8 tensors' slices (q/k/v and gate/up with their rows' scales, o and down with the whole
// scale vector), each listed in the manifest with its dtype and slice and verified against its
// checksum on import; a served CPU worker with tensor_parallel 2 on them gives the tokens and
// logprobs of a single-process worker quantizing the same directory at load with the same
// degree.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "server_test_support.h"
#include "sharded_server_support.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/model/quantize_at_load.h"
#include "weight-server/model/shard_plan.h"
#include "weight-server/sharing/model_import.h"

namespace hearth {
namespace {

using json = nlohmann::json;
using test::ServerProcess;

std::vector<std::string> fp8_sharded_args() {
  return test::sharded_server_args(2, {"--quantize", "fp8"});
}

TEST(ShardedFp8Server, EachRankHoldsTheSlicesOfTheWholeFp8Model) {
  ServerProcess server(fp8_sharded_args());
  const HfModel whole = quantize_fp8_at_load(HfModel::open(test::tiny_model_dir()), 2);
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    ipc::Client client = test::connect_client(server.socket());
    const ImportedModel m = import_served_model(client, "tiny", {.verify = true, .rank = rank});
    ASSERT_TRUE(m.manifest.config.quantization.fp8());
    const ShardPlan plan = ShardPlan::make(m.manifest.config, 2);
    ASSERT_EQ(m.store->tensors().size(), plan.tensors(rank).size());
    std::map<DType, int> dtypes;
    for (const TensorShard& want : plan.tensors(rank)) {
      const StoredTensor& got = m.store->at(want.name);
      const HfTensor& source = *whole.find(want.name);
      ++dtypes[got.info.dtype];
      EXPECT_EQ(got.info.dtype, source.info.dtype) << want.name;
      EXPECT_EQ(got.info.shape, want.shape) << want.name;
      // The piece is the whole fp8 tensor's slice, byte for byte.
      std::vector<std::byte> cut(shard_bytes(want, dtype_size(source.info.dtype)));
      copy_shard(want, dtype_size(source.info.dtype), source.data, cut);
      ASSERT_EQ(got.info.bytes, cut.size()) << want.name;
      EXPECT_EQ(std::memcmp(got.data, cut.data(), cut.size()), 0) << want.name;
    }
    EXPECT_EQ(dtypes[DType::F8_E4M3], 7 * m.manifest.config.n_layers);
    EXPECT_EQ(dtypes[DType::F32], 7 * m.manifest.config.n_layers);  // the scales
    // o's scales are whole on every rank; q's are the rank's rows.
    const ModelConfig& c = m.manifest.config;
    EXPECT_EQ(m.store->at("model.layers.3.self_attn.o_proj.weight_scale").info.shape,
              (std::vector<int64_t>{c.hidden, 1}));
    EXPECT_EQ(m.store->at("model.layers.3.self_attn.q_proj.weight_scale").info.shape,
              (std::vector<int64_t>{c.q_dim() / 2, 1}));
  }

  // hearth-ctl manifest shows a scale piece with its dtype and slice.
  const test::WorkerRun shown = test::run_binary("hearth-ctl", server.dir(),
                                                 {"--socket", server.socket(), "manifest", "tiny"});
  ASSERT_TRUE(shown.status.success()) << shown.err;
  const json manifest = json::parse(shown.out)["manifest"];
  bool seen_q = false, seen_o = false;
  for (const json& t : manifest["ranks"][1]["tensors"]) {
    if (t["name"] == "model.layers.0.self_attn.q_proj.weight_scale") {
      seen_q = true;
      EXPECT_EQ(t["dtype"], "F32");
      EXPECT_EQ(t["slice"], json({{"split", "rows"}, {"begin", 128}, {"end", 256}}));
    }
    if (t["name"] == "model.layers.0.self_attn.o_proj.weight_scale") {
      seen_o = true;
      EXPECT_EQ(t["slice"], json({{"split", "replicated"}, {"begin", 0}, {"end", 256}}));
    }
  }
  EXPECT_TRUE(seen_q && seen_o) << manifest.dump();
}

TEST(ShardedFp8Server, ServedWorkerEqualsTheSingleProcessTp2Fp8Engine) {
  ServerProcess server(fp8_sharded_args());
  const test::WorkerRun a =
      test::run_worker(server.dir(), test::tp2_generation(test::served_tiny(server), 11));
  const test::WorkerRun b = test::run_worker(
      server.dir(), test::tp2_generation(test::tiny_directory({"--quantize", "fp8"}), 11));
  const test::WorkerRun c =
      test::run_worker(server.dir(), test::tp2_generation(test::tiny_directory(), 11));
  ASSERT_TRUE(a.status.success()) << a.err;
  ASSERT_TRUE(b.status.success()) << b.err;
  ASSERT_TRUE(c.status.success()) << c.err;
  EXPECT_EQ(std::count(a.out.begin(), a.out.end(), '\n'), 25) << a.out;
  const auto tokens = [](const test::WorkerRun& r) { return test::parse_stream(r.out).tokens; };
  EXPECT_EQ(tokens(a), tokens(b));
  // The weights were fp8: the bf16 model's TP=2 logprobs are others.
  EXPECT_NE(tokens(a), tokens(c));
}

}  // namespace
}  // namespace hearth
