// KV leases per device (issue 26): a tensor-parallel hearth-server (memfd, so CI takes the path
// the vmm GPUs take) keeps one budget per rank's device. Leases name their device, each device's
// budget is accounted and reported on its own, a full device gives nothing while another still
// gives, a bad device index is a clear error, and a closed connection returns every device's
// chunks.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server_test_support.h"

namespace hearth {
namespace {

using json = nlohmann::json;
using test::ServerProcess;

constexpr uint64_t kMiB = uint64_t(1) << 20;
constexpr uint64_t kChunk = 2 * kMiB;

std::vector<std::string> tp_server_args(int ranks, uint64_t memory_mb) {
  return {"--backend",
          "memfd",
          "--model",
          test::tiny_model_dir().string() + ":tiny",
          "--tensor-parallel",
          std::to_string(ranks),
          "--memory-mb",
          std::to_string(memory_mb),
          "--gpu-memory-fraction",
          "0.5"};
}

ipc::Frame lease(ipc::Client& c, uint64_t device, uint64_t chunks, uint64_t min_chunks = 0) {
  ipc::KvLeaseRequest request{kChunk, chunks, min_chunks, device};
  return c.call(ipc::op::kKvLease, ipc::make_kv_lease_args(request));
}

size_t granted(const ipc::Frame& f) {
  return f.body.at("chunks").size();
}

uint64_t kv_on(const json& stats, size_t device) {
  return stats.at("kv_devices").at(device).at("kv_bytes").get<uint64_t>();
}

// Polls the server until `pred(stats)` holds; the deadline only stops a hang.
template <typename Pred>
json wait_for_stats(ServerProcess& server, Pred pred) {
  const auto deadline = test::patience_deadline();
  json s = server.stats();
  while (!pred(s) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    s = server.stats();
  }
  return s;
}

TEST(KvLeaseDevices, EachRanksDeviceHasItsOwnBudget) {
  ServerProcess server(tp_server_args(2, 100));
  const json before = server.stats();
  ASSERT_EQ(before["kv_devices"].size(), 2u) << before.dump();
  uint64_t weights = 0;
  for (size_t d = 0; d < 2; ++d) {
    const json& dev = before["kv_devices"][d];
    EXPECT_EQ(dev["device"], d);
    EXPECT_EQ(dev["limit_bytes"], 50 * kMiB);
    EXPECT_GT(dev["weights_bytes"].get<uint64_t>(), 0u);  // rank d's pieces
    EXPECT_EQ(dev["kv_bytes"], 0);
    EXPECT_FALSE(dev.contains("gpu"));  // memfd: host memory
    weights += dev["weights_bytes"].get<uint64_t>();
  }
  EXPECT_EQ(weights, before["allocation_bytes"].get<uint64_t>());
  EXPECT_EQ(before["memory"], [&] {  // device 0's, as a server of one device reports it
    json m = before["kv_devices"][0];
    m.erase("device");
    return m;
  }());

  ipc::Client a = test::connect_client(server.socket(), "a");
  const ipc::Frame on_one = lease(a, 1, 3);
  EXPECT_EQ(on_one.body["device"], 1);
  ASSERT_EQ(granted(on_one), 3u);
  ASSERT_EQ(granted(lease(a, 0, 2)), 2u);
  json stats = server.stats();
  EXPECT_EQ(kv_on(stats, 0), 2 * kChunk);
  EXPECT_EQ(kv_on(stats, 1), 3 * kChunk);
  EXPECT_EQ(stats["memory"]["kv_bytes"], 2 * kChunk);
  ASSERT_EQ(stats["workers"].size(), 1u);
  const json& kv = stats["workers"][0]["kv"];
  EXPECT_EQ(kv["bytes"], 5 * kChunk);
  EXPECT_EQ(kv["devices"], json::parse(R"([{"device": 0, "chunks": 2, "bytes": 4194304},
                                           {"device": 1, "chunks": 3, "bytes": 6291456}])"));

  // b takes everything device 1 has left: c then gets nothing there, and device 0 still gives.
  ipc::Client b = test::connect_client(server.socket(), "b");
  const uint64_t free1 = stats["kv_devices"][1]["free_bytes"].get<uint64_t>() / kChunk;
  ASSERT_GT(free1, 1u);
  EXPECT_EQ(granted(lease(b, 1, free1, free1)), free1);
  ipc::Client c = test::connect_client(server.socket(), "c");
  EXPECT_EQ(granted(lease(c, 1, 1, 1)), 0u);
  EXPECT_EQ(granted(lease(c, 0, 1, 1)), 1u);
  stats = server.stats();
  EXPECT_LE(stats["kv_devices"][1]["free_bytes"].get<uint64_t>(), kChunk);
  for (size_t d = 0; d < 2; ++d) {
    const json& dev = stats["kv_devices"][d];
    EXPECT_LE(dev["weights_bytes"].get<uint64_t>() + dev["kv_bytes"].get<uint64_t>(),
              dev["limit_bytes"].get<uint64_t>());
  }

  // A device the server does not have is named in a clear error; nothing moves.
  try {
    lease(a, 2, 1);
    ADD_FAILURE() << "a lease on device 2 of a server of 2 devices was accepted";
  } catch (const ipc::ProtocolError& e) {
    EXPECT_EQ(e.code(), ipc::ErrorCode::kBadRequest);
    EXPECT_NE(std::string(e.what()).find("device 2 is not a KV device of this server (it has 2"),
              std::string::npos)
        << e.what();
  }

  // a's connection closes: both devices take its chunks back, and the server says why.
  a.close();
  stats = wait_for_stats(server, [&](const json& s) { return kv_on(s, 1) == free1 * kChunk; });
  EXPECT_EQ(kv_on(stats, 1), free1 * kChunk);
  EXPECT_EQ(kv_on(stats, 0), kChunk);
  EXPECT_NE(server.log().find("5 chunks) returned: disconnected"), std::string::npos)
      << server.log();
}

}  // namespace
}  // namespace hearth
