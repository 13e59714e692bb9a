#include "worker/serve_handler.h"

#include <cstdio>
#include <type_traits>
#include <utility>

#include "worker/serve_protocol.h"

namespace hearth {

using broker::Reply;

static_assert(std::is_same_v<ServeLoop::ClientId, broker::ClientId>);

ServeHandler::ServeHandler(broker::BrokerOptions broker, Options options)
    : options_(options), queues_(options.max_queued_event_bytes, options.max_events_reply_bytes) {
  broker_ = std::make_unique<broker::Broker>(std::move(broker), *this);
}

void ServeHandler::run(ServeLoop& loop) {
  loop_ = &loop;
  broker_->run();
}

Reply ServeHandler::handle(broker::Session& session, const ipc::Request& request) {
  const ClientId client = session.id();
  if (request.op == ipc::op::kSubmit) {
    nlohmann::json body = submit_request_object(request.body);
    queues_.submitted(client);
    loop_->submit(client, request.id, std::move(body));
    return Reply::deferred();
  }
  if (request.op == ipc::op::kEvents) {
    check_no_arguments(request.body, "events");
    std::optional<ClientEventQueues::Taken> taken = queues_.events(client, request.id);
    if (!taken) return Reply::deferred();  // a long poll: answered once there is something
    return events_reply(client, std::move(*taken));
  }
  if (request.op == ipc::op::kCancel) {
    loop_->cancel(client, request.id, cancel_request_id(request.body));
    return Reply::deferred();
  }
  if (request.op == ipc::op::kStats) {
    check_no_arguments(request.body, "stats");
    return Reply::ok(stats_json(loop_->stats(), loop_->iteration_tokens()));
  }
  return Reply::error(ipc::ErrorCode::kUnknownOp,
                      "a serving hearth-worker does not handle '" + request.op + "'");
}

void ServeHandler::on_disconnect(broker::Session& session) {
  queues_.disconnected(session.id());
  loop_->disconnect(session.id());
}

void ServeHandler::answer(ClientId client, ServeLoop::ReplyTo reply_to, nlohmann::json result) {
  // std::function needs a copyable callable.
  auto shared = std::make_shared<nlohmann::json>(std::move(result));
  broker_->post([this, client, reply_to, shared] {
    broker_->complete(client, reply_to, Reply::ok(std::move(*shared)));
  });
}

void ServeHandler::refuse(ClientId client, ServeLoop::ReplyTo reply_to, std::string message) {
  // The client stops waiting for it first.
  broker_->post([this, client] {
    if (auto a = queues_.refused(client)) complete(std::move(*a));
  });
  broker_->post([this, client, reply_to, message = std::move(message)] {
    broker_->complete(client, reply_to, Reply::error(ipc::ErrorCode::kBadRequest, message));
  });
}

void ServeHandler::deliver(std::vector<ServeLoop::ClientOutput> outputs) {
  auto shared = std::make_shared<std::vector<ServeLoop::ClientOutput>>(std::move(outputs));
  broker_->post([this, shared] {
    for (const ServeLoop::ClientOutput& out : *shared)
      if (queues_.add(out.client, out.output)) loop_->hold(out.client, true);
    for (ClientEventQueues::Answer& a : queues_.answers()) complete(std::move(a));
  });
}

void ServeHandler::idle() {
  if (!options_.quiet)
    std::fprintf(stderr, "hearth-worker: idle for %lld ms, exiting\n",
                 static_cast<long long>(options_.idle_exit.count()));
  broker_->shutdown();
}

void ServeHandler::drain() {
  broker_->post([this] {
    draining_ = true;
    stop_when_drained();
  });
}

void ServeHandler::stop_now() {
  broker_->shutdown();
}

nlohmann::json ServeHandler::with_stats(nlohmann::json reply) const {
  reply["stats"] = stats_json(loop_->stats(), loop_->iteration_tokens());
  return reply;
}

Reply ServeHandler::events_reply(ClientId client, ClientEventQueues::Taken taken) {
  if (taken.released) loop_->hold(client, false);
  Reply reply = Reply::ok(with_stats(std::move(taken.reply)));
  stop_when_drained();  // the broker writes this reply before it stops
  return reply;
}

void ServeHandler::complete(ClientEventQueues::Answer answer) {
  if (answer.taken.released) loop_->hold(answer.client, false);
  broker_->complete(answer.client, answer.request,
                    Reply::ok(with_stats(std::move(answer.taken.reply))));
  stop_when_drained();
}

// Loop thread: while shutting down, stops the broker once every client has its events.
void ServeHandler::stop_when_drained() {
  if (!draining_ || stop_requested_) return;
  if (!queues_.drained()) return;
  stop_requested_ = true;
  broker_->shutdown();
}

}  // namespace hearth
