#pragma once

#include "broker/reply.h"
#include "broker/session.h"
#include "ipc/protocol.h"

namespace hearth::broker {

// What the weight server plugs into the broker: it answers requests and learns when clients
// come and go. Every call comes from the broker's loop thread, so a handler that blocks stalls
// every client: slow work (load) belongs on another thread, answered with Reply::deferred() and
// later Broker::post + Broker::complete.
class Handler {
 public:
  virtual ~Handler() = default;

  // Called for requests with a known op other than hello and shutdown (the broker answers
  // those), after the admin check for admin ops. Throw ipc::ProtocolError to reply with its
  // code; any other exception is answered as kInternal and logged.
  virtual Reply handle(Session& session, const ipc::Request& request) = 0;

  // A client passed the uid and capacity checks.
  virtual void on_connect(Session& /*session*/) {}

  // The client is gone: it disconnected, crashed, was dropped, or the broker is stopping.
  // Called exactly once per on_connect, before run() returns, and never from inside another
  // handler call or Broker::complete. Release whatever the client held (its leases).
  virtual void on_disconnect(Session& /*session*/) {}
};

}  // namespace hearth::broker
