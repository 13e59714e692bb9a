#include "ipc/peer_credentials.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include "ipc/errors.h"
#include "ipc/unix_socket.h"
#include "test_util.h"

namespace hearth::ipc {
namespace {

TEST(PeerCredentials, ReportsThisProcessOverASocketPair) {
  auto [a, b] = test::socket_pair();
  const PeerCredentials peer = peer_credentials(b.get());
  EXPECT_EQ(peer.uid, ::geteuid());
  EXPECT_EQ(peer.gid, ::getegid());
  EXPECT_EQ(peer.pid, ::getpid());
}

TEST(PeerCredentials, ReportsTheConnectingProcess) {
  test::TempDir tmp;
  UnixListener listener = UnixListener::listen(tmp / "hearth.sock");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      UniqueFd socket = connect_unix(listener.path());
      char byte;
      // Wait for the parent to hang up (read returns 0).
      ::_exit(::read(socket.get(), &byte, 1) == 0 ? 0 : 2);
    } catch (...) {
      ::_exit(1);
    }
  }
  UniqueFd accepted;
  ASSERT_TRUE(test::eventually([&] { return (accepted = listener.accept()).valid(); }));
  const PeerCredentials peer = peer_credentials(accepted.get());
  EXPECT_EQ(peer.pid, child);
  EXPECT_EQ(peer.uid, ::geteuid());
  accepted.reset();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(PeerCredentials, FailsClearlyOnSomethingThatIsNotASocket) {
  UniqueFd file = test::make_memfd("x");
  EXPECT_THROW(peer_credentials(file.get()), IpcError);
}

}  // namespace
}  // namespace hearth::ipc
