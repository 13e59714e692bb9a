#include "ipc/peer_credentials.h"

#include <sys/socket.h>

#include <cerrno>

#include "ipc/errors.h"

namespace hearth::ipc {

PeerCredentials peer_credentials(int socket) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    throw_errno("getsockopt(SO_PEERCRED)", errno);
  }
  PeerCredentials peer{cred.uid, cred.gid, cred.pid, {}};
  // The size is asked first: a process may be in up to NGROUPS_MAX (65536) groups.
  socklen_t bytes = 0;
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERGROUPS, nullptr, &bytes) != 0 && errno == ERANGE &&
      bytes > 0) {
    peer.groups.resize(bytes / sizeof(gid_t));
    if (::getsockopt(socket, SOL_SOCKET, SO_PEERGROUPS, peer.groups.data(), &bytes) != 0) bytes = 0;
    peer.groups.resize(bytes / sizeof(gid_t));
  }
  return peer;
}

}  // namespace hearth::ipc
