#include "worker/client_event_queues.h"

#include "ipc/errors.h"
#include "worker/engine/event_json.h"

namespace hearth {

using json = nlohmann::json;

std::optional<ClientEventQueues::Answer> ClientEventQueues::refused(ClientId client) {
  auto it = clients_.find(client);
  if (it == clients_.end()) return std::nullopt;
  --it->second.in_flight;
  return answer(client, it->second);
}

std::optional<ClientEventQueues::Taken> ClientEventQueues::events(ClientId client,
                                                                  ipc::RequestId request) {
  Client& c = clients_[client];
  if (c.waiting)
    throw ipc::ProtocolError(ipc::ErrorCode::kBusy, "an events call is already waiting");
  if (!c.events.empty() || c.in_flight == 0) return take(c);
  c.waiting = request;
  return std::nullopt;
}

bool ClientEventQueues::add(ClientId client, const RequestOutput& output) {
  auto it = clients_.find(client);
  if (it == clients_.end()) return false;  // gone
  Client& c = it->second;
  for (const TokenOutput& t : output.tokens) enqueue(c, token_event_json(output.id, t));
  if (output.finish) {
    enqueue(c, done_event_json(output.id, *output.finish));
    --c.in_flight;
  }
  if (c.held || c.queued_bytes <= max_queued_bytes_) return false;
  // Back-pressure: its requests wait (keeping their KV) until it reads.
  c.held = true;
  return true;
}

std::vector<ClientEventQueues::Answer> ClientEventQueues::answers() {
  std::vector<Answer> out;
  for (auto& [client, c] : clients_)
    if (auto a = answer(client, c)) out.push_back(std::move(*a));
  return out;
}

bool ClientEventQueues::drained() const {
  for (const auto& [client, c] : clients_)
    if (!c.events.empty()) return false;
  return true;
}

std::size_t ClientEventQueues::queued_bytes(ClientId client) const {
  auto it = clients_.find(client);
  return it == clients_.end() ? 0 : it->second.queued_bytes;
}

bool ClientEventQueues::held(ClientId client) const {
  auto it = clients_.find(client);
  return it != clients_.end() && it->second.held;
}

// The next reply: at most reply_bytes_ of events (at least one); a held client that has read
// enough lets its requests run again.
ClientEventQueues::Taken ClientEventQueues::take(Client& c) {
  json list = json::array();
  std::size_t bytes = 0;
  while (!c.events.empty()) {
    const std::string& e = c.events.front();
    if (!list.empty() && bytes + e.size() > reply_bytes_) break;
    bytes += e.size();
    c.queued_bytes -= e.size();
    list.push_back(json::parse(e));  // our own text: it parses
    c.events.pop_front();
  }
  Taken taken;
  if (c.held && c.queued_bytes <= max_queued_bytes_ / 2) {
    c.held = false;
    taken.released = true;
  }
  taken.reply = {{"events", std::move(list)}, {"more", !c.events.empty()}};
  return taken;
}

// A waiting call is answered once there is something to say.
std::optional<ClientEventQueues::Answer> ClientEventQueues::answer(ClientId id, Client& c) {
  if (!c.waiting || (c.events.empty() && c.in_flight > 0)) return std::nullopt;
  Answer a{id, *c.waiting, take(c)};
  c.waiting.reset();
  return a;
}

void ClientEventQueues::enqueue(Client& c, const json& event) {
  std::string text = event.dump(-1, ' ', false, json::error_handler_t::replace);
  c.queued_bytes += text.size();
  c.events.push_back(std::move(text));
}

}  // namespace hearth
