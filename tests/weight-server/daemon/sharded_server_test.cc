// hearth-server --tensor-parallel 2 as a real process (issue 26, memfd backend): a client
// importing as rank r receives only its rank's pieces, each verified against the manifest's
// checksum; hearth-ctl list shows the ranks; an unsharded import and a rank out of range are
// refused with the reason.
#include <gtest/gtest.h>

#include "server_test_support.h"
#include "sharded_server_support.h"
#include "weight-server/model/shard_plan.h"
#include "weight-server/sharing/model_import.h"

namespace hearth {
namespace {

using json = nlohmann::json;
using test::ServerProcess;
using test::sharded_server_args;

TEST(ShardedServer, EachRankImportsOnlyItsPieces) {
  ServerProcess server(sharded_server_args(2));
  std::vector<uint64_t> ids;
  for (int rank = 0; rank < 2; ++rank) {
    ipc::Client client = test::connect_client(server.socket());
    const ImportedModel m = import_served_model(client, "tiny", {.verify = true, .rank = rank});
    const ShardPlan plan = ShardPlan::make(m.manifest.config, 2);
    ASSERT_EQ(m.store->tensors().size(), plan.tensors(rank).size());
    for (size_t i = 0; i < plan.tensors(rank).size(); ++i) {
      const TensorShard& want = plan.tensors(rank)[i];
      const StoredTensor& got = m.store->at(want.name);
      EXPECT_EQ(got.info.shape, want.shape) << want.name;
      EXPECT_EQ(m.manifest.tensors[i].rank, rank);
      ids.push_back(m.manifest.tensors[i].allocation);
    }
    // The server counted only this rank's descriptors.
    EXPECT_EQ(server.stats()["descriptors_total"], ids.size());
  }
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end()) << "ranks share allocations";

  const test::WorkerRun list =
      test::run_binary("hearth-ctl", server.dir(), {"--socket", server.socket(), "list"});
  ASSERT_TRUE(list.status.success()) << list.err;
  const json models = json::parse(list.out)["models"];
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0]["tensor_parallel"], 2);
  ASSERT_EQ(models[0]["ranks"].size(), 2u);
  EXPECT_EQ(models[0]["ranks"][1]["rank"], 1);
  EXPECT_GT(models[0]["ranks"][1]["bytes"].get<uint64_t>(), 0u);

  // hearth-ctl manifest shows each rank's pieces with their slices.
  const test::WorkerRun shown = test::run_binary("hearth-ctl", server.dir(),
                                                 {"--socket", server.socket(), "manifest", "tiny"});
  ASSERT_TRUE(shown.status.success()) << shown.err;
  const json manifest = json::parse(shown.out)["manifest"];
  EXPECT_EQ(manifest["tensor_parallel"], 2);
  const json& piece = manifest["ranks"][1]["tensors"][2];  // after embed and layer 0's norm
  EXPECT_EQ(piece["name"], "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(piece["slice"], json({{"split", "rows"}, {"begin", 128}, {"end", 256}}));
}

TEST(ShardedServer, ImportsThatDoNotMatchTheShardingAreRefused) {
  ServerProcess server(sharded_server_args(2));
  auto error_of = [&](std::optional<int> rank) -> std::string {
    ipc::Client client = test::connect_client(server.socket());
    try {
      import_served_model(client, "tiny", {.rank = rank});
    } catch (const std::exception& e) {
      return e.what();
    }
    return "(imported)";
  };
  EXPECT_NE(error_of(std::nullopt).find("sharded for tensor parallel 2: a worker must import it"),
            std::string::npos);
  EXPECT_NE(error_of(2).find("rank 2 is not in 0..1"), std::string::npos);
  EXPECT_EQ(server.stats()["descriptors_total"], 0);
}

// A served CPU worker with tensor_parallel 2 runs both ranks in process on the server's pieces
// and gives the tokens and logprobs a single-process TP 2 worker gives from the directory.
TEST(ShardedServer, ServedWorkerRunsTheRanksOnTheServersPieces) {
  ServerProcess server(sharded_server_args(2));
  const test::WorkerRun a =
      test::run_worker(server.dir(), test::tp2_generation(test::served_tiny(server), 7));
  const test::WorkerRun b =
      test::run_worker(server.dir(), test::tp2_generation(test::tiny_directory(), 7));
  ASSERT_TRUE(a.status.success()) << a.err;
  ASSERT_TRUE(b.status.success()) << b.err;
  EXPECT_EQ(std::count(a.out.begin(), a.out.end(), '\n'), 25) << a.out;
  EXPECT_EQ(test::parse_stream(a.out).tokens, test::parse_stream(b.out).tokens);

  // Without the degree the engine is refused, naming what to set.
  const test::WorkerRun c = test::run_worker(
      server.dir(),
      test::concat(test::served_tiny(server), test::generation_args(7, 24, /*ignore_eos=*/true)));
  EXPECT_FALSE(c.status.success());
  EXPECT_NE(c.err.find("set tensor_parallel=2"), std::string::npos) << c.err;
}

TEST(ShardedServer, RefusesADegreeTheModelCannotTake) {
  ServerProcess server(sharded_server_args(4), /*wait=*/false);
  const ExitStatus status = server.process().wait();
  EXPECT_FALSE(status.success());
  EXPECT_NE(server.log().find("num_key_value_heads 2 is not a multiple of 4"), std::string::npos)
      << server.log();
}

}  // namespace
}  // namespace hearth
