#pragma once

#include <sys/types.h>

namespace hearth::ipc {

// Who is at the other end of a connected Unix socket, as the kernel recorded it at connect time
// (SO_PEERCRED): it cannot be forged by the peer.
struct PeerCredentials {
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
};

// Throws IpcError if the credentials cannot be read (e.g. not a Unix socket).
PeerCredentials peer_credentials(int socket);

}  // namespace hearth::ipc
