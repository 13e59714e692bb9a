#include "ipc/unix_socket.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cstring>
#include <fstream>

#include "ipc/errors.h"
#include "test_util.h"

namespace hearth::ipc {
namespace {

struct stat stat_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

// A socket bound at `path` the way another program would: no lock file, no checks.
UniqueFd bind_raw(const std::string& path, bool listening) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  if (listening) {
    EXPECT_EQ(::listen(fd.get(), 8), 0);
  }
  return fd;
}

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const IpcError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an IpcError";
  return {};
}

TEST(UnixSocket, CreatesAPrivateDirectoryAndAnOwnerOnlySocket) {
  test::TempDir tmp;
  const std::string dir = tmp / "run";
  const std::string path = dir + "/hearth.sock";
  const mode_t old_umask = ::umask(0);  // the modes must not depend on the caller's umask
  UnixListener listener = UnixListener::listen(path);
  ::umask(old_umask);
  const struct stat d = stat_of(dir);
  EXPECT_TRUE(S_ISDIR(d.st_mode));
  EXPECT_EQ(d.st_mode & 07777, 0700u);
  const struct stat s = stat_of(path);
  EXPECT_TRUE(S_ISSOCK(s.st_mode));
  EXPECT_EQ(s.st_mode & 07777, 0600u);
  EXPECT_EQ(s.st_uid, ::geteuid());
}

TEST(UnixSocket, AppliesConfiguredModes) {
  test::TempDir tmp;
  const std::string path = tmp / "shared/hearth.sock";
  ListenOptions options;
  options.directory_mode = 0750;
  options.socket_mode = 0660;
  UnixListener listener = UnixListener::listen(path, options);
  EXPECT_EQ(stat_of(tmp / "shared").st_mode & 07777, 0750u);
  EXPECT_EQ(stat_of(path).st_mode & 07777, 0660u);
}

TEST(UnixSocket, RefusesADirectoryOthersCanEnter) {
  test::TempDir tmp;
  ASSERT_EQ(::chmod(tmp.path().c_str(), 0755), 0);
  const std::string text = message_of([&] { UnixListener::listen(tmp / "hearth.sock"); });
  EXPECT_NE(text.find("mode 0755"), std::string::npos) << text;
  EXPECT_NE(::access((tmp / "hearth.sock").c_str(), F_OK), 0);
}

TEST(UnixSocket, RefusesASocketDirectoryThatIsASymbolicLink) {
  test::TempDir tmp;
  ASSERT_EQ(::mkdir((tmp / "real").c_str(), 0700), 0);
  ASSERT_EQ(::symlink((tmp / "real").c_str(), (tmp / "link").c_str()), 0);
  const std::string text = message_of([&] { UnixListener::listen(tmp / "link/hearth.sock"); });
  EXPECT_NE(text.find("socket directory " + (tmp / "link").string() + " is a symbolic link (to " +
                      (tmp / "real").string() + ")"),
            std::string::npos)
      << text;
  EXPECT_NE(::access((tmp / "real/hearth.sock").c_str(), F_OK), 0);
  EXPECT_NE(::access((tmp / "link/hearth.sock.lock").c_str(), F_OK), 0);
}

TEST(UnixSocket, RefusesADirectoryOwnedBySomeoneElse) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give the directory away";
  test::TempDir tmp;
  ASSERT_EQ(::chown(tmp.path().c_str(), 12345, 12345), 0);
  const std::string text = message_of([&] { UnixListener::listen(tmp / "hearth.sock"); });
  EXPECT_NE(text.find("belongs to uid 12345"), std::string::npos) << text;
}

TEST(UnixSocket, ReplacesAStaleSocket) {
  test::TempDir tmp;
  const std::string path = tmp / "hearth.sock";
  bind_raw(path, /*listening=*/false);  // closed at once: the file stays, nobody accepts
  EXPECT_TRUE(S_ISSOCK(stat_of(path).st_mode));
  EXPECT_THROW(connect_unix(path), ServerNotRunning);
  UnixListener listener = UnixListener::listen(path);
  UniqueFd client = connect_unix(path);
  UniqueFd accepted;
  ASSERT_TRUE(test::eventually([&] { return (accepted = listener.accept()).valid(); }));
}

TEST(UnixSocket, NeverTakesALiveSocket) {
  test::TempDir tmp;
  const std::string path = tmp / "hearth.sock";
  UniqueFd live = bind_raw(path, /*listening=*/true);
  const ino_t inode = stat_of(path).st_ino;
  const std::string text = message_of([&] { UnixListener::listen(path); });
  EXPECT_NE(text.find("already listening"), std::string::npos) << text;
  EXPECT_EQ(stat_of(path).st_ino, inode);
  // Still the live server's socket.
  UniqueFd client = connect_unix(path);
  UniqueFd accepted(::accept4(live.get(), nullptr, nullptr, SOCK_CLOEXEC));
  EXPECT_TRUE(accepted.valid());
}

TEST(UnixSocket, ASecondListenerOnTheSamePathIsRefused) {
  test::TempDir tmp;
  const std::string path = tmp / "hearth.sock";
  UnixListener first = UnixListener::listen(path);
  const std::string text = message_of([&] { UnixListener::listen(path); });
  EXPECT_NE(text.find("already running"), std::string::npos) << text;
  UniqueFd client = connect_unix(path);
  UniqueFd accepted;
  ASSERT_TRUE(test::eventually([&] { return (accepted = first.accept()).valid(); }));
}

TEST(UnixSocket, RefusesToReplaceSomethingThatIsNotASocket) {
  test::TempDir tmp;
  const std::string path = tmp / "hearth.sock";
  std::ofstream(path) << "precious";
  const std::string text = message_of([&] { UnixListener::listen(path); });
  EXPECT_NE(text.find("not a socket"), std::string::npos) << text;
  std::ifstream in(path);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "precious");
}

TEST(UnixSocket, CloseRemovesOnlyItsOwnSocket) {
  test::TempDir tmp;
  const std::string path = tmp / "hearth.sock";
  { UnixListener listener = UnixListener::listen(path); }
  EXPECT_NE(::access(path.c_str(), F_OK), 0);

  UnixListener old = UnixListener::listen(path);
  ASSERT_EQ(::unlink(path.c_str()), 0);
  UniqueFd successor = bind_raw(path, /*listening=*/true);  // someone took over the path
  old.close();
  EXPECT_EQ(::access(path.c_str(), F_OK), 0);
}

TEST(UnixSocket, AcceptsNonBlockingSockets) {
  test::TempDir tmp;
  UnixListener listener = UnixListener::listen(tmp / "hearth.sock");
  EXPECT_FALSE(listener.accept().valid());  // nothing pending: empty, no blocking
  UniqueFd client = connect_unix(listener.path());
  UniqueFd accepted = listener.accept();
  ASSERT_TRUE(accepted.valid());
  EXPECT_TRUE(::fcntl(accepted.get(), F_GETFL) & O_NONBLOCK);
  EXPECT_TRUE(::fcntl(accepted.get(), F_GETFD) & FD_CLOEXEC);
}

TEST(UnixSocket, ConnectSaysTheServerIsNotRunning) {
  test::TempDir tmp;
  const std::string path = tmp / "hearth.sock";
  try {
    connect_unix(path);
    FAIL();
  } catch (const ServerNotRunning& e) {
    EXPECT_NE(std::string(e.what()).find("not running at " + path), std::string::npos);
  }
  bind_raw(path, /*listening=*/false);
  try {
    connect_unix(path);
    FAIL();
  } catch (const ServerNotRunning& e) {
    EXPECT_NE(std::string(e.what()).find("stale"), std::string::npos) << e.what();
  }
}

TEST(UnixSocket, RefusesAPathTooLongForSockaddr) {
  const std::string path = "/tmp/" + std::string(200, 'x');
  EXPECT_NE(message_of([&] { connect_unix(path); }).find("too long"), std::string::npos);
  EXPECT_NE(message_of([&] { UnixListener::listen(path); }).find("too long"), std::string::npos);
}

}  // namespace
}  // namespace hearth::ipc
