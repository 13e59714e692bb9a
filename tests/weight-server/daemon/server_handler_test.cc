// The weight server's handler behind a real broker in this process: the protocol ops (list,
// manifest, import, release, stats), their errors, leases, admin load/unload, and the uid
// checks that a separate process running as this same user cannot exercise.
#include <gtest/gtest.h>

#include <unistd.h>

#include "in_process_server.h"
#include "ipc/client.h"
#include "ipc/errors.h"
#include "weight-server/model/quantization_config.h"
#include "weight-server/sharing/model_import.h"

namespace hearth {
namespace {

using json = nlohmann::json;
using ipc::ErrorCode;

ipc::Client connect(const std::string& socket, const std::string& name = "test") {
  return test::client_of(socket, name);
}

// The error a call ends in: its code and message.
ipc::ProtocolError call_error(ipc::Client& client, std::string_view op,
                              json args = json::object()) {
  try {
    client.call(op, std::move(args));
  } catch (const ipc::ProtocolError& e) {
    return e;
  }
  ADD_FAILURE() << op << " succeeded";
  return ipc::ProtocolError(ErrorCode::kInternal, "(succeeded)");
}

class ServerHandlerTest : public ::testing::Test {
 protected:
  void SetUp() override { write_synthetic_model(model_dir_.path(), SynthOptions{}); }
  test::TempDir model_dir_;
};

TEST_F(ServerHandlerTest, ListManifestImportAndRelease) {
  test::InProcessServer server({}, model_dir_.path());
  ipc::Client client = connect(server.socket());
  const json list = client.call(ipc::op::kList).body;
  ASSERT_EQ(list["models"].size(), 1u);
  EXPECT_EQ(list["models"][0]["name"], "tiny");
  EXPECT_EQ(list["models"][0]["backend"], "memfd");
  EXPECT_EQ(list["models"][0]["leases"], 0);

  ImportedModel imported = import_served_model(client, "tiny", {.verify = true});
  EXPECT_EQ(imported.manifest.model, "tiny");
  json stats = client.call(ipc::op::kStats).body;
  EXPECT_EQ(stats["leases"], 1);
  EXPECT_EQ(stats["clients"], 1);
  ASSERT_EQ(stats["workers"].size(), 1u);
  EXPECT_EQ(stats["workers"][0]["pid"], ::getpid());
  EXPECT_EQ(stats["workers"][0]["models"], json::array({"tiny"}));
  EXPECT_EQ(stats["descriptors_total"], imported.manifest.tensors.size());
  EXPECT_GT(stats["bytes"].get<uint64_t>(), 0u);
  EXPECT_GE(stats["uptime_s"].get<double>(), 0.0);

  EXPECT_EQ(client.call(ipc::op::kRelease, {{"model", "tiny"}}).body["released"], true);
  EXPECT_EQ(client.call(ipc::op::kStats).body["leases"], 0);
  EXPECT_EQ(client.call(ipc::op::kRelease, {{"model", "tiny"}}).body["released"], false);
}

TEST_F(ServerHandlerTest, RequestErrorsAreClear) {
  test::InProcessServer server({}, model_dir_.path());
  ipc::Client client = connect(server.socket());
  auto e = call_error(client, ipc::op::kManifest, {{"model", "nope"}});
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_EQ(e.message(), "no model named 'nope' is served here (serving: tiny)");
  e = call_error(client, ipc::op::kManifest);
  EXPECT_EQ(e.code(), ErrorCode::kBadRequest);
  EXPECT_NE(e.message().find("model"), std::string::npos);
  e = call_error(client, ipc::op::kImport, {{"model", "tiny"}, {"allocations", {0, 100000}}});
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_NE(e.message().find("has no allocation 100000"), std::string::npos) << e.message();
  e = call_error(client, ipc::op::kImport,
                 {{"model", "tiny"}, {"allocations", std::vector<int>(251, 0)}});
  EXPECT_EQ(e.code(), ErrorCode::kTooLarge);
  e = call_error(client, ipc::op::kImport, {{"model", "tiny"}, {"allocations", "all"}});
  EXPECT_EQ(e.code(), ErrorCode::kBadRequest);
  e = call_error(client, ipc::op::kRelease, {{"model", 3}});
  EXPECT_EQ(e.code(), ErrorCode::kBadRequest);
  // A refused import takes no lease.
  EXPECT_EQ(client.call(ipc::op::kStats).body["leases"], 0);
  // Errors leave the connection usable.
  EXPECT_EQ(client.call(ipc::op::kList).body["models"].size(), 1u);
}

TEST_F(ServerHandlerTest, DisconnectEndsTheLease) {
  test::InProcessServer server({}, model_dir_.path());
  ipc::Client observer = connect(server.socket(), "observer");
  {
    ipc::Client worker = connect(server.socket(), "worker");
    const std::uint64_t ids[] = {0, 1, 2};
    worker.import_allocations("tiny", ids);
    EXPECT_EQ(observer.call(ipc::op::kStats).body["leases"], 1);
  }
  EXPECT_TRUE(test::eventually([&] { return observer.call(ipc::op::kStats).body["leases"] == 0; }));
  EXPECT_EQ(observer.call(ipc::op::kStats).body["leases_total"], 1);
}

// A worker's connection is its lease: it may sit quiet as long as it holds one, while a client
// that holds none is dropped after the quiet timeout, and so is the worker once it releases.
TEST_F(ServerHandlerTest, QuietClientsAreKeptOnlyWhileTheyHoldALease) {
  broker::BrokerOptions options;
  options.quiet_timeout = std::chrono::milliseconds(300);
  test::InProcessServer server(options, model_dir_.path());
  ipc::Client worker = connect(server.socket(), "worker");
  const std::uint64_t ids[] = {0};
  worker.import_allocations("tiny", ids);
  ipc::Client idle = connect(server.socket(), "idle");
  auto dropped_for_idling = [&] {
    int n = 0;
    for (const std::string& line : server.logs())
      n += line.find("dropped: idle for 300 ms without holding a lease") != std::string::npos;
    return n;
  };
  ASSERT_TRUE(test::eventually([&] { return dropped_for_idling() == 1; }));
  // The worker has been quiet longer than `idle` was, and is still served.
  EXPECT_EQ(worker.call(ipc::op::kStats).body["leases"], 1);
  EXPECT_THROW(idle.call(ipc::op::kList), ipc::IpcError);
  worker.call(ipc::op::kRelease, {{"model", "tiny"}});
  ASSERT_TRUE(test::eventually([&] { return dropped_for_idling() == 2; }));
  EXPECT_THROW(worker.call(ipc::op::kList), ipc::IpcError);
}

// Every load runs on a thread of its own; that thread is joined as soon as its answer is
// delivered, not at shutdown, so load/unload cycles do not pile up dead threads and stacks.
TEST_F(ServerHandlerTest, LoadThreadsAreJoinedWhenTheirLoadIsDone) {
  test::InProcessServer server({}, model_dir_.path());
  ipc::ClientOptions slow;
  slow.timeout = std::chrono::seconds(120);
  ipc::Client admin = ipc::Client::connect(server.socket(), slow);
  for (int cycle = 0; cycle < 5; ++cycle) {
    admin.call(ipc::op::kLoad, {{"dir", model_dir_.path()}, {"name", "again"}});
    // A load that fails is a load all the same.
    call_error(admin, ipc::op::kLoad,
               {{"dir", model_dir_.path().string() + "/missing"}, {"name", "no"}});
    admin.call(ipc::op::kUnload, {{"model", "again"}});
  }
  EXPECT_TRUE(test::eventually([&] { return server.handler().load_threads() == 0; }))
      << server.handler().load_threads() << " load threads not joined after 10 loads";
}

TEST_F(ServerHandlerTest, AdminLoadAndUnload) {
  test::InProcessServer server({}, model_dir_.path());
  test::TempDir second;
  SynthOptions synth;
  synth.preset = "tiny-qwen3";
  write_synthetic_model(second.path(), synth);

  ipc::ClientOptions slow;
  slow.timeout = std::chrono::seconds(120);
  ipc::Client admin = ipc::Client::connect(server.socket(), slow);
  EXPECT_EQ(admin.server_hello()["admin"], true);
  const json loaded = admin.call(ipc::op::kLoad, {{"dir", second.path()}, {"name", "qwen"}}).body;
  EXPECT_EQ(loaded["model"]["name"], "qwen");
  EXPECT_EQ(loaded["model"]["backend"], "memfd");
  EXPECT_EQ(admin.call(ipc::op::kList).body["models"].size(), 2u);
  EXPECT_EQ(import_served_model(admin, "qwen", {.verify = true}).manifest.config.qk_norm, true);

  auto e = call_error(admin, ipc::op::kLoad, {{"dir", second.path()}, {"name", "qwen"}});
  EXPECT_EQ(e.code(), ErrorCode::kBusy);
  EXPECT_NE(e.message().find("already served"), std::string::npos);
  e = call_error(admin, ipc::op::kLoad,
                 {{"dir", second.path().string() + "/missing"}, {"name", "missing"}});
  EXPECT_EQ(e.code(), ErrorCode::kBadRequest);
  EXPECT_NE(e.message().find("cannot load 'missing'"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("no such directory"), std::string::npos) << e.message();
  for (const std::string& dir :
       std::vector<std::string>{"", "relative/model", std::string("/tmp/a\0b", 8)}) {
    e = call_error(admin, ipc::op::kLoad, {{"dir", dir}});
    EXPECT_EQ(e.code(), ErrorCode::kBadRequest) << e.message();
    EXPECT_NE(e.message().find("'dir' must be the absolute path of a model directory"),
              std::string::npos)
        << e.message();
  }
  e = call_error(admin, ipc::op::kLoad, {{"dir", second.path()}, {"name", "bad name"}});
  EXPECT_EQ(e.code(), ErrorCode::kBadRequest);
  e = call_error(admin, ipc::op::kLoad,
                 {{"dir", second.path()}, {"name", "x"}, {"backend", "tpu"}});
  EXPECT_EQ(e.code(), ErrorCode::kBadRequest);

  // This connection holds a lease on qwen (from the import above): unload is refused with
  // the count, and goes through once the lease is released.
  e = call_error(admin, ipc::op::kUnload, {{"model", "qwen"}});
  EXPECT_EQ(e.code(), ErrorCode::kBusy);
  EXPECT_NE(e.message().find("has 1 lease (worker pids " + std::to_string(::getpid()) + ")"),
            std::string::npos)
      << e.message();
  admin.call(ipc::op::kRelease, {{"model", "qwen"}});
  EXPECT_EQ(admin.call(ipc::op::kUnload, {{"model", "qwen"}}).body["unloaded"], true);
  EXPECT_EQ(call_error(admin, ipc::op::kManifest, {{"model", "qwen"}}).code(),
            ErrorCode::kNotFound);
  EXPECT_EQ(call_error(admin, ipc::op::kUnload, {{"model", "qwen"}}).code(), ErrorCode::kNotFound);
}

// `quantize` per load (hearth-ctl load --quantize): fp8 serves the projections in e4m3 with
// their scales though the server itself quantizes nothing; anything but fp8 or none is refused.
TEST_F(ServerHandlerTest, AdminLoadQuantizesWhenAsked) {
  test::InProcessServer server({}, model_dir_.path());
  ipc::ClientOptions slow;
  slow.timeout = std::chrono::seconds(120);
  ipc::Client admin = ipc::Client::connect(server.socket(), slow);
  admin.call(ipc::op::kLoad, {{"dir", model_dir_.path()}, {"name", "eight"}, {"quantize", "fp8"}});
  admin.call(ipc::op::kLoad, {{"dir", model_dir_.path()}, {"name", "same"}, {"quantize", "none"}});
  const Manifest fp8 = import_served_model(admin, "eight", {.verify = true}).manifest;
  EXPECT_EQ(fp8.config.quantization, kFp8PerChannel);
  int codes = 0;
  for (const ManifestTensor& t : fp8.tensors) codes += t.info.dtype == DType::F8_E4M3;
  EXPECT_EQ(codes, 7 * fp8.config.n_layers);
  const Manifest same = import_served_model(admin, "same", {.verify = true}).manifest;
  EXPECT_FALSE(same.config.quantization.fp8());
  for (const ManifestTensor& t : same.tensors) EXPECT_NE(t.info.dtype, DType::F8_E4M3);

  const auto e = call_error(admin, ipc::op::kLoad,
                            {{"dir", model_dir_.path()}, {"name", "x"}, {"quantize", "int4"}});
  EXPECT_EQ(e.code(), ErrorCode::kBadRequest);
  EXPECT_NE(e.message().find("unknown quantize 'int4' (fp8 or none)"), std::string::npos)
      << e.message();
}

TEST_F(ServerHandlerTest, UidNotInTheAllowListIsRefused) {
  broker::BrokerOptions options;
  options.allowed_uids = {::geteuid() + 1};  // everyone but us
  test::InProcessServer server(options, model_dir_.path());
  try {
    connect(server.socket());
    FAIL() << "connected although the uid is not allowed";
  } catch (const ipc::ProtocolError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnauthorized);
    EXPECT_NE(e.message().find("uid " + std::to_string(::geteuid()) + " is not allowed"),
              std::string::npos)
        << e.message();
  }
}

TEST_F(ServerHandlerTest, AdminOpsFromAnotherUidAreRefused) {
  broker::BrokerOptions options;
  options.admin_uid = ::geteuid() + 1;  // we are not the admin
  test::InProcessServer server(options, model_dir_.path());
  ipc::Client client = connect(server.socket());
  EXPECT_EQ(client.server_hello()["admin"], false);
  for (auto [op, args] :
       {std::pair{ipc::op::kLoad, json{{"dir", model_dir_.path()}, {"name", "again"}}},
        std::pair{ipc::op::kUnload, json{{"model", "tiny"}}},
        std::pair{ipc::op::kShutdown, json::object()}}) {
    const auto e = call_error(client, op, args);
    EXPECT_EQ(e.code(), ErrorCode::kUnauthorized) << op;
    EXPECT_NE(e.message().find("admin operation"), std::string::npos) << e.message();
  }
  // Workers' ops still work, and the model is still there.
  EXPECT_EQ(import_served_model(client, "tiny").manifest.model, "tiny");
}

}  // namespace
}  // namespace hearth
