// An admin `load` opens the model's files with the admin's rights, not the server's (issue 21,
// defect 7): a root server whose --admin-uid is nobody must not read a root-only directory or
// a root-only tokenizer.json for nobody. Needs root (CI runs as root): the server runs as root
// and the client is a forked child that becomes uid 65534.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server_test_support.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using test::ServerProcess;

constexpr uid_t kNobody = 65534;

// The outcome of `load` of `dir` as `name`, asked by a client running as uid and gid `id`:
// "ok", or the error the server answered.
std::string load_as(uid_t id, const std::string& socket, const std::string& dir,
                    const std::string& name) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return "pipe2 failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string result = "ok";
    if (::setgroups(0, nullptr) != 0 || ::setgid(id) != 0 || ::setuid(id) != 0) {
      result = "cannot become uid " + std::to_string(id);
    } else {
      try {
        test::connect_client(socket).call(ipc::op::kLoad, {{"dir", dir}, {"name", name}});
      } catch (const ipc::ProtocolError& e) {
        result = e.message();
      } catch (const std::exception& e) {
        result = e.what();
      }
    }
    [[maybe_unused]] const ssize_t n = ::write(fds[1], result.data(), result.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) != 0;) {
    if (n > 0)
      out.append(buffer, size_t(n));
    else if (errno != EINTR)
      break;
  }
  ::close(fds[0]);
  ::waitpid(pid, nullptr, 0);
  return out;
}

// A copy of the tiny model's files in `dir` (mode 0755, files 0644).
void copy_tiny_model(const fs::path& dir) {
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms(0755));
  for (const char* file : {"config.json", "generation_config.json", "model.safetensors",
                           "tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(test::tiny_model_dir() / file, dir / file);
}

class LoadAccess : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0)
      GTEST_SKIP() << "needs root: the server must run as root and the client as another uid";
    server_.emplace(
        std::vector<std::string>{"--backend", "memfd", "--admin-uid", std::to_string(kNobody)});
    // The socket's directory is opened to the admin uid; the test's own must be too.
    fs::permissions(server_->dir().path(), fs::perms(0711));
    fs::permissions(tmp_.path(), fs::perms(0711));
  }
  std::optional<ServerProcess> server_;
  test::TempDir tmp_;
};

TEST_F(LoadAccess, AModelUnderARootOnlyDirectoryIsRefused) {
  const fs::path parent = tmp_ / "root-only";
  copy_tiny_model(parent / "model");
  fs::permissions(parent, fs::perms(0700));
  const std::string dir = (parent / "model").string();
  const std::string result = load_as(kNobody, server_->socket(), dir, "secret");
  EXPECT_NE(result.find(dir), std::string::npos) << result;
  EXPECT_NE(result.find("Permission denied"), std::string::npos) << result;
  EXPECT_NE(result.find("uid 65534"), std::string::npos) << result;
  EXPECT_EQ(server_->stats()["models"].size(), 0u);
}

TEST_F(LoadAccess, ARootOnlyTokenizerIsRefused) {
  const fs::path dir = tmp_ / "model";
  copy_tiny_model(dir);
  fs::permissions(dir / "tokenizer.json", fs::perms(0600));
  const std::string result = load_as(kNobody, server_->socket(), dir.string(), "secret");
  EXPECT_NE(result.find((dir / "tokenizer.json").string()), std::string::npos) << result;
  EXPECT_NE(result.find("Permission denied"), std::string::npos) << result;
  EXPECT_EQ(server_->stats()["models"].size(), 0u);
}

// What the admin may read, it may load, also after a refusal.
TEST_F(LoadAccess, WhatTheAdminCanReadLoads) {
  const fs::path dir = tmp_ / "model";
  copy_tiny_model(dir);
  fs::permissions(dir / "tokenizer.json", fs::perms(0600));
  EXPECT_NE(load_as(kNobody, server_->socket(), dir.string(), "first"), "ok");
  fs::permissions(dir / "tokenizer.json", fs::perms(0644));
  EXPECT_EQ(load_as(kNobody, server_->socket(), dir.string(), "second"), "ok");
  EXPECT_EQ(server_->stats()["models"].size(), 1u);
}

}  // namespace
}  // namespace hearth
