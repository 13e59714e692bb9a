// A real hearth-worker against a server that lies: descriptors of the wrong size, unsealed or
// not memfds at all, bytes that differ from the manifest's checksums, manifests that do not
// match their architecture. The worker must refuse each with a clear message and a non-zero
// exit, never crash (a truncated mapping would end it with SIGBUS).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <functional>

#include "tests/weight-server/daemon/in_process_server.h"
#include "tests/weight-server/daemon/server_test_support.h"
#include "weight-server/sharing/checksum.h"
#include "weight-server/sharing/manifest.h"
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

// The bytes of a received descriptor.
std::string contents_of(int fd) {
  std::string bytes;
  char buf[65536];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0) throw std::runtime_error("pread");
    if (n == 0) return bytes;
    bytes.append(buf, size_t(n));
    at += n;
  }
}

std::span<const std::byte> bytes_of(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
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
    // A text prompt (the tokenizer's tests) replaces the token ids.
    if (std::find(extra.begin(), extra.end(), "--prompt") != extra.end())
      args.erase(args.begin() + 4, args.begin() + 6);
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

  // Replaces the descriptor of shared file `name` in the manifest reply by `make(original)`;
  // `make` may also edit the manifest's entry for the file.
  static LyingHandler::Edit replace_file(const std::string& name,
                                         std::function<UniqueFd(int original, json& entry)> make) {
    return [=](const ipc::Request& request, broker::Reply& reply) {
      if (request.op != ipc::op::kManifest) return;
      json& entry = reply.fields["manifest"]["files"][name];
      const size_t fd = entry["fd"].get<size_t>();
      reply.fds.at(fd) = make(reply.fds.at(fd).get(), entry);
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

// Issue 16: the tokenizer files and the server's tokenizer image arrive as sealed memfds.
TEST_F(TamperingTest, WorkerTokenizesThroughTheSharedImage) {
  const test::WorkerRun run =
      run_against([](const ipc::Request&, broker::Reply&) {}, {"--prompt", "hello world"});
  ASSERT_TRUE(run.status.success()) << run.err;
  const test::Stream s = test::parse_stream(run.out);
  EXPECT_EQ(s.tokens.size(), 4u);
  EXPECT_EQ(s.done["timeline"]["tokenizer"], "shared-image") << s.done.dump();
  EXPECT_GT(s.done["prompt_tokens"].get<int>(), 2);
  EXPECT_EQ(run.err.find("refused"), std::string::npos) << run.err;
}

TEST_F(TamperingTest, RefusedImageFallsBackToTheSharedTokenizerJson) {
  const std::vector<std::string> prompt = {"--prompt", "hello world"};
  const test::WorkerRun honest = run_against([](const ipc::Request&, broker::Reply&) {}, prompt);
  ASSERT_TRUE(honest.status.success()) << honest.err;
  const std::string tokens = test::parse_stream(honest.out).tokens.empty()
                                 ? ""
                                 : test::parse_stream(honest.out).tokens.front();
  auto flipped = [](int original) {
    std::string bytes = contents_of(original);
    bytes[bytes.size() / 2] ^= 0x5a;
    return bytes;
  };
  struct Case {
    const char* what;
    LyingHandler::Edit edit;
    const char* reason;
  };
  const std::vector<Case> cases = {
      {"corrupted",
       replace_file("tokenizer.image",
                    [&](int fd, json&) {
                      return SealedMemfd::create("bad", bytes_of(flipped(fd))).duplicate();
                    }),
       "differs from the manifest's"},
      {"truncated",
       replace_file(
           "tokenizer.image",
           [](int fd, json&) {
             const std::string b = contents_of(fd);
             return SealedMemfd::create("short", bytes_of(b.substr(0, b.size() / 2))).duplicate();
           }),
       "the received memfd holds"},
      {"unsealed",
       replace_file("tokenizer.image",
                    [](int fd, json&) { return memfd_of(contents_of(fd).size(), 0); }),
       "is not sealed"},
      // A server that lies consistently (its manifest has the corrupted bytes' checksum): the
      // image's own checksum catches it.
      {"corrupted, manifest agreeing",
       replace_file("tokenizer.image",
                    [&](int fd, json& entry) {
                      const std::string b = flipped(fd);
                      entry["xxh3"] = checksum_to_hex(xxh3_checksum(bytes_of(b)));
                      return SealedMemfd::create("bad", bytes_of(b)).duplicate();
                    }),
       "tokenizer image: "},
  };
  for (const Case& c : cases) {
    const test::WorkerRun run = run_against(c.edit, prompt);
    ASSERT_TRUE(run.status.success()) << c.what << ": " << run.err;
    const test::Stream s = test::parse_stream(run.out);
    EXPECT_EQ(s.done["timeline"]["tokenizer"], "parsed") << c.what;
    ASSERT_FALSE(s.tokens.empty()) << c.what;
    EXPECT_EQ(s.tokens.front(), tokens) << c.what << ": the fallback tokenizes differently";
    EXPECT_EQ(s.done["prompt_tokens"], test::parse_stream(honest.out).done["prompt_tokens"]);
    const std::string warning = "the shared tokenizer image was refused";
    const size_t at = run.err.find(warning);
    EXPECT_NE(at, std::string::npos) << c.what << ": " << run.err;
    EXPECT_EQ(run.err.find(warning, at + 1), std::string::npos) << c.what << ": said twice";
    EXPECT_NE(run.err.find(c.reason), std::string::npos) << c.what << ": " << run.err;
  }
}

TEST_F(TamperingTest, BadFileMemfdsAreRefused) {
  const std::vector<std::string> prompt = {"--prompt", "hello world"};
  expect_refused(
      run_against(replace_file("tokenizer.json",
                               [](int fd, json&) { return memfd_of(contents_of(fd).size(), 0); }),
                  prompt),
      "shared file tokenizer.json: the received memfd is not sealed");
  expect_refused(
      run_against(replace_file("tokenizer.json",
                               [](int fd, json&) {
                                 std::string b = contents_of(fd);
                                 b.pop_back();
                                 return SealedMemfd::create("short", bytes_of(b)).duplicate();
                               }),
                  prompt),
      "shared file tokenizer.json: the received memfd holds");
  expect_refused(
      run_against(replace_file("generation_config.json",
                               [](int fd, json&) {
                                 std::string b = contents_of(fd);
                                 b[0] = ' ';
                                 return SealedMemfd::create("edited", bytes_of(b)).duplicate();
                               }),
                  prompt),
      "shared file generation_config.json: xxh3");
  expect_refused(run_against([](const ipc::Request& request, broker::Reply& reply) {
                   if (request.op == ipc::op::kManifest) reply.fds.pop_back();
                 }),
                 "names 4 files but its reply carried 3 descriptors");
}

TEST_F(TamperingTest, MissingDescriptorsAreRefused) {
  expect_refused(run_against([](const ipc::Request& request, broker::Reply& reply) {
                   if (request.op == ipc::op::kImport) reply.fds.pop_back();
                 }),
                 "descriptors for allocations");
}

}  // namespace
}  // namespace hearth
