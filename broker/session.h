#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ipc/peer_credentials.h"

namespace hearth::broker {

class Broker;
using ClientId = std::uint64_t;

// The client behind a request, as a handler sees it: an id that is never reused while the
// broker runs (key leases and other per-client state by it) and the peer's credentials, read
// from the socket at accept. A Session lives until Handler::on_disconnect returns; for a reply
// that completes later, keep id() and broker(), not the Session.
class Session {
 public:
  Session(Broker& broker, ClientId id, ipc::PeerCredentials peer, bool admin)
      : broker_(&broker), id_(id), peer_(peer), admin_(admin) {}

  ClientId id() const { return id_; }
  uid_t uid() const { return peer_.uid; }
  gid_t gid() const { return peer_.gid; }
  pid_t pid() const { return peer_.pid; }
  const std::vector<gid_t>& groups() const { return peer_.groups; }
  // The peer runs as the broker's admin uid (by default the server's own): admin ops allowed.
  bool is_admin() const { return admin_; }
  // The name the client gave in hello (e.g. "hearth-worker"); empty before hello.
  const std::string& client_name() const { return client_name_; }
  // Whether the client holds something its connection keeps alive (a lease), as the handler
  // says. A client that holds nothing and sends nothing for BrokerOptions::quiet_timeout is
  // dropped; one that holds a lease may stay quiet as long as it likes.
  bool holds_lease() const { return holds_lease_; }
  void set_holds_lease(bool holds) { holds_lease_ = holds; }
  Broker& broker() const { return *broker_; }

 private:
  friend class Broker;
  Broker* broker_;
  ClientId id_;
  ipc::PeerCredentials peer_;
  bool admin_;
  std::string client_name_;
  bool holds_lease_ = false;
};

}  // namespace hearth::broker
