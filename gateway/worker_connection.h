// One connection from the gateway to a batching worker (`hearth-worker --serve`, see
// worker/engine_server.h): many requests in flight at once, each with a callback that receives
// its events on the connection's reader thread. While any request is in flight one `events`
// call is kept waiting at the worker (a long poll), so events arrive as soon as a step makes
// them; each reply also carries the worker's engine stats, kept for /metrics. When the worker
// dies, every request still in flight gets a final error event, so no HTTP client waits forever.
//
// Threads and owners: the reader thread runs every callback. A callback may own what owns this
// connection (a CompletionSession holds it until its choices end), so the last owner can drop on
// the reader itself; then the reader cannot be joined by the destructor. close() is how an
// owner that outlives the callbacks' targets (the WorkerPool, before the gateway's Metrics and
// catalog go) makes sure no callback runs after it: it ends the connection and joins the reader.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "ipc/errors.h"
#include "ipc/frame.h"
#include "base/unique_fd.h"

namespace hearth::gateway {

class WorkerConnection : public std::enable_shared_from_this<WorkerConnection> {
 public:
  // Called on the reader thread, in order, for each event of the request; the last one has
  // "done": true. Must not block for long: it delays every other request's events.
  using EventCallback = std::function<void(const nlohmann::json& event)>;

  // Connects and says hello. Throws ipc::ServerNotRunning or ipc::IpcError.
  static std::shared_ptr<WorkerConnection> connect(const std::string& socket_path);
  // Joins the reader unless it runs on it (a callback dropped the last owner without close():
  // the reader is then detached, and touches no member after that callback).
  ~WorkerConnection();
  WorkerConnection(const WorkerConnection&) = delete;
  WorkerConnection& operator=(const WorkerConnection&) = delete;

  // Submits `request` (its "id" is the request id) and waits for the worker to accept it.
  // Throws ipc::ProtocolError with the worker's code (bad_request, busy, shutting_down), or
  // too_large without sending when the request is over the worker's frame limit (its hello's
  // "max_request_bytes"), or ipc::IpcError when the worker is gone. After acceptance, `on_event`
  // receives every event.
  void submit(const nlohmann::json& request, EventCallback on_event);

  // Asks the worker to stop the request (its KV blocks are freed at once); its last event then
  // says "cancelled". Never throws: a dead worker has nothing left to cancel. Should the worker
  // refuse the cancel, the request ends with an error event saying so.
  void cancel(const std::string& request_id);

  // Sends an op and waits for its reply body (e.g. stats). Throws like submit.
  nlohmann::json call(const std::string& op, nlohmann::json args = nlohmann::json::object());

  // The engine stats the worker sent with its latest events reply (null before the first): what
  // /metrics reads, so a scrape never waits on a worker.
  nlohmann::json latest_stats() const;

  // Ends the connection (the worker sees its client leave) and waits for the reader: once it
  // returns, every request has had its last event (an error if the worker sent none) and no
  // callback runs again. Any thread but the reader (a callback must not call it), any number of
  // times.
  void close();

  bool alive() const;
  size_t in_flight() const;
  size_t max_request_bytes() const { return max_request_bytes_; }
  // The most prompt + max_tokens the worker takes (its hello's "max_sequence_tokens"; 0 when
  // it does not say).
  int64_t max_sequence_tokens() const { return max_sequence_tokens_; }

 private:
  WorkerConnection(UniqueFd socket, size_t max_request_bytes, int64_t max_sequence_tokens);
  void read_loop();
  void handle_frame(ipc::Frame& frame, std::string& why);
  // Sends {op, id, ...args}; returns the id. The reply arrives in replies_.
  uint64_t send(const std::string& op, nlohmann::json args);
  nlohmann::json wait_reply(uint64_t id);
  void fail_all(const std::string& why);
  // Keeps one events call waiting while requests are in flight. Called with mutex_ held.
  void poll_events_locked();
  void dispatch_events(const nlohmann::json& events);
  // Ends a request in flight with an error event (no-op if it already ended).
  void end_request(const std::string& id, const std::string& why);

  UniqueFd socket_;
  size_t max_request_bytes_;
  int64_t max_sequence_tokens_;
  std::mutex write_mutex_;
  mutable std::mutex mutex_;
  std::condition_variable replied_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::optional<nlohmann::json>> replies_;  // awaited call ids
  std::map<std::string, EventCallback> requests_;              // in flight, by request id
  std::map<uint64_t, std::string> cancels_;                    // unanswered cancels' requests
  std::optional<uint64_t> poll_id_;                            // the events call waiting
  nlohmann::json latest_stats_;                                // from the last events reply
  bool dead_ = false;
  std::string death_;
  std::mutex close_mutex_;  // one joiner at a time; a second closer waits for the first
  std::thread reader_;
};

}  // namespace hearth::gateway
