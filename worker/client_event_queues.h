// A serving worker's undelivered events, one queue per client (engine_server.h). Each client's
// events wait in order as JSON text (a parsed event with 20 top logprobs takes ~20 times its
// text's size, which the bound would not see) and go out at most a reply's worth at a time. A
// client whose queue passes its bound is held (its requests not scheduled, their KV kept) until
// it has read down to half: a slow reader slows only itself, and nothing is dropped. The queues
// also count each client's requests in flight and keep its waiting events call (a long poll).
// No sockets, no threads: the broker's loop thread owns them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/protocol.h"
#include "worker/engine/request_output.h"

namespace hearth {

class ClientEventQueues {
 public:
  using ClientId = std::uint64_t;

  // An events reply, {"events": [...], "more": bool}; `released`: the client was held and has
  // now read enough, so its requests may run again.
  struct Taken {
    nlohmann::json reply;
    bool released = false;
  };
  // A waiting events call that can be answered now.
  struct Answer {
    ClientId client = 0;
    ipc::RequestId request = 0;
    Taken taken;
  };

  // `max_queued_bytes`: a client's undelivered events beyond this hold its requests.
  // `reply_bytes`: the most events one reply carries (at least one event).
  ClientEventQueues(std::size_t max_queued_bytes, std::size_t reply_bytes)
      : max_queued_bytes_(max_queued_bytes), reply_bytes_(reply_bytes) {}

  // One more request of `client` in flight (submitted, not yet ended).
  void submitted(ClientId client) { ++clients_[client].in_flight; }
  // A submit that will not run: one fewer in flight, so a waiting events call with nothing
  // left to wait for is answered. Nothing if the client is gone.
  std::optional<Answer> refused(ClientId client);
  void disconnected(ClientId client) { clients_.erase(client); }

  // An events call: the reply now when there are events or nothing is in flight; otherwise
  // nullopt and the call waits, to come back from answers(). Throws ipc::ProtocolError(kBusy)
  // if another call of the client's already waits.
  std::optional<Taken> events(ClientId client, ipc::RequestId request);

  // A step's output for one of `client`'s requests (its id the client's own): its events are
  // queued. True when the client has just passed its bound and is now held. Nothing if the
  // client is gone.
  bool add(ClientId client, const RequestOutput& output);
  // Every waiting events call that has something to say now.
  std::vector<Answer> answers();

  // No client has an event left to collect.
  bool drained() const;
  std::size_t queued_bytes(ClientId client) const;
  bool held(ClientId client) const;

 private:
  struct Client {
    std::deque<std::string> events;
    std::size_t queued_bytes = 0;
    bool held = false;
    std::optional<ipc::RequestId> waiting;
    int in_flight = 0;
  };

  Taken take(Client& c);
  std::optional<Answer> answer(ClientId id, Client& c);
  void enqueue(Client& c, const nlohmann::json& event);

  std::size_t max_queued_bytes_;
  std::size_t reply_bytes_;
  std::map<ClientId, Client> clients_;
};

}  // namespace hearth
