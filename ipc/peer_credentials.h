#pragma once

#include <sys/types.h>

#include <vector>

namespace hearth::ipc {

// Who is at the other end of a connected Unix socket, as the kernel recorded it at connect time
// (SO_PEERCRED): it cannot be forged by the peer.
struct PeerCredentials {
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
  // Supplementary groups (SO_PEERGROUPS); empty where the kernel cannot say (before 4.13),
  // which only ever grants less: a server opening files as the peer uses these.
  std::vector<gid_t> groups;
};

// Throws IpcError if the credentials cannot be read (e.g. not a Unix socket).
PeerCredentials peer_credentials(int socket);

}  // namespace hearth::ipc
