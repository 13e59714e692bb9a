// A real hearth-worker against a server that lies: descriptors of the wrong size, unsealed or
// not memfds at all, bytes that differ from the manifest's checksums, manifests that do not
// match their architecture. The worker must refuse each with a clear message and a non-zero
// exit, never crash (a truncated mapping would end it with SIGBUS).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <functional>

#include "in_process_server.h"
#include "server_test_support.h"
#include "weight-server/sharing/sealed_memfd.h"

namespace hearth {
namespace {

using json = nlohmann::json;

// Passes every request to the real handler and lets the test rewrite the reply.
class LyingHandler final : public broker::Handler {
 public:
  using Edit = std::function<void(const ipc::Request&, broker::Reply&)>;
  LyingHandler(broker::Handler*& inner, Edit edit) : inner_(inner), edit_(std::move(edit)) {}
  broker::Reply handle(broker::Session& session, const ipc::Request& request) override {
    broker::Reply reply = inner_->handle(session, request);
    edit_(request, reply);
    return reply;
  }
  void on_connect(broker::Session& s) override { inner_->on_connect(s); }
  void on_disconnect(broker::Session& s) override { inner_->on_disconnect(s); }

 private:
  broker::Handler*& inner_;
  Edit edit_;
};

UniqueFd memfd_of(uint64_t bytes, int seals, char fill = 0) {
  UniqueFd fd(::memfd_create("liar", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  const std::string content(bytes, fill);
  if (::write(fd.get(), content.data(), content.size()) != ssize_t(content.size()))
    throw std::runtime_error("write");
  if (seals) ::fcntl(fd.get(), F_ADD_SEALS, seals);
  return fd;
}

class TamperingTest : public ::testing::Test {
 protected:
  void SetUp() override { write_synthetic_model(model_dir_.path(), SynthOptions{}); }

  // Runs a served worker against a server whose replies go through `edit`.
  test::WorkerRun run_against(LyingHandler::Edit edit, std::vector<std::string> extra = {}) {
    broker::Handler* inner = nullptr;
    LyingHandler liar(inner, std::move(edit));
    test::InProcessServer server({}, model_dir_.path(), &liar);
    inner = &server.handler();
    std::vector<std::string> args = {"--server",        server.socket(), "--model",      "tiny",
                                     "--prompt-tokens", "1,2,3",         "--max-tokens", "4",
                                     "--backend",       "cpu",           "--format",     "jsonl"};
    args.insert(args.end(), extra.begin(), extra.end());
    return test::run_worker(tmp_, args);
  }

  // Replaces the descriptor of the import's allocation `victim` by `make()`.
  static LyingHandler::Edit replace_fd(size_t victim, std::function<UniqueFd(uint64_t bytes)> make,
                                       uint64_t bytes) {
    return [=](const ipc::Request& request, broker::Reply& reply) {
      if (request.op != ipc::op::kImport || reply.fds.size() <= victim) return;
      reply.fds[victim] = make(bytes);
    };
  }

  static void expect_refused(const test::WorkerRun& run, const std::string& message) {
    EXPECT_TRUE(run.status.exited_with(1)) << run.status.describe() << "\n" << run.err;
    EXPECT_NE(run.err.find("hearth-worker: error: "), std::string::npos) << run.err;
    EXPECT_NE(run.err.find(message), std::string::npos) << run.err;
    EXPECT_EQ(run.out.find("\"token\""), std::string::npos) << "generated on refused weights";
  }

  test::TempDir model_dir_, tmp_;
  const std::string victim_ = "model.layers.0.self_attn.q_proj.weight";  // allocation 2
  const uint64_t victim_bytes_ = 64 * 64 * 2;
};

TEST_F(TamperingTest, HonestServerWorks) {
  const test::WorkerRun run =
      run_against([](const ipc::Request&, broker::Reply&) {}, {"--verify-weights"});
  EXPECT_TRUE(run.status.success()) << run.err;
  EXPECT_EQ(test::parse_stream(run.out).tokens.size(), 4u);
}

TEST_F(TamperingTest, WrongSizeDescriptorIsRefused) {
  expect_refused(
      run_against(replace_fd(
          2, [](uint64_t b) { return memfd_of(b / 2, kRequiredWeightSeals); }, victim_bytes_)),
      "tensor '" + victim_ + "': the received memfd holds 4096 bytes, the manifest says 8192");
  expect_refused(
      run_against(replace_fd(
          2, [](uint64_t b) { return memfd_of(b * 2, kRequiredWeightSeals); }, victim_bytes_)),
      "the manifest says 8192");
}

TEST_F(TamperingTest, UnsealedMemfdIsRefused) {
  expect_refused(run_against(replace_fd(
                     2, [](uint64_t b) { return memfd_of(b, 0); }, victim_bytes_)),
                 "tensor '" + victim_ + "': the received memfd is not sealed");
  // Sealed against writes but not against shrinking: the server could truncate it under the
  // worker's mapping.
  expect_refused(
      run_against(replace_fd(
          2, [](uint64_t b) { return memfd_of(b, F_SEAL_WRITE | F_SEAL_GROW); }, victim_bytes_)),
      "seals: write|grow");
}

TEST_F(TamperingTest, DescriptorThatIsNoMemfdIsRefused) {
  expect_refused(run_against(replace_fd(
                     2,
                     [](uint64_t) {
                       int p[2];
                       if (::pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
                       ::close(p[1]);
                       return UniqueFd(p[0]);
                     },
                     victim_bytes_)),
                 "tensor '" + victim_ + "': the received descriptor is not a memfd");
}

TEST_F(TamperingTest, WrongBytesAreCaughtByVerifyWeights) {
  auto edit = replace_fd(
      2, [](uint64_t b) { return memfd_of(b, kRequiredWeightSeals, 'x'); }, victim_bytes_);
  expect_refused(run_against(edit, {"--verify-weights"}), "tensor '" + victim_ + "': xxh3");
  // Without verification the bytes are taken on trust, as documented: the run completes.
  EXPECT_TRUE(run_against(edit).status.success());
}

TEST_F(TamperingTest, TamperedManifestsAreRefused) {
  auto edit_manifest = [](std::function<void(json&)> fn) {
    return [fn](const ipc::Request& request, broker::Reply& reply) {
      if (request.op == ipc::op::kManifest) fn(reply.fields["manifest"]);
    };
  };
  expect_refused(run_against(edit_manifest([](json& m) { m["version"] = 99; })),
                 "version 99 is not supported");
  expect_refused(run_against(edit_manifest([](json& m) {
                   m["tensors"][2]["shape"] = {32, 128};
                 })),
                 "tensor '" + victim_ + "' has shape [32, 128], the architecture implies [64, 64]");
  // A manifest that claims a bigger tensor than the descriptor holds: refused at the size check.
  expect_refused(run_against(edit_manifest([](json& m) {
                   m["tensors"][2]["allocation_bytes"] =
                       m["tensors"][2]["allocation_bytes"].get<uint64_t>() * 4;
                 })),
                 "the manifest says 32768");
  expect_refused(
      run_against(edit_manifest([](json& m) { m["tensors"][2]["xxh3"] = "0000000000000000"; }),
                  {"--verify-weights"}),
      "differs from the manifest's 0000000000000000");
  expect_refused(run_against(edit_manifest([](json& m) { m["model"] = "other"; })),
                 "got the manifest of 'other'");
}

TEST_F(TamperingTest, MissingDescriptorsAreRefused) {
  expect_refused(run_against([](const ipc::Request& request, broker::Reply& reply) {
                   if (request.op == ipc::op::kImport) reply.fds.pop_back();
                 }),
                 "descriptors for allocations");
}

}  // namespace
}  // namespace hearth
