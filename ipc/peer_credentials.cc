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
  return {cred.uid, cred.gid, cred.pid};
}

}  // namespace hearth::ipc
