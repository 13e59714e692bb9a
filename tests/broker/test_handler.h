#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "broker/broker.h"
#include "broker/handler.h"

namespace hearth::test {

// A stand-in for the weight server, for broker tests: one model "test" whose allocations are
// memfds holding "allocation <id>", leases per client, and replies that complete later ("load",
// and "stats" with "later": true), which a test can hold back until it releases them.
class TestHandler : public broker::Handler {
 public:
  struct Event {
    broker::ClientId id;
    pid_t pid;
    uid_t uid;
    bool admin;
  };

  broker::Reply handle(broker::Session& session, const ipc::Request& request) override;
  void on_connect(broker::Session& session) override;
  void on_disconnect(broker::Session& session) override;

  // While held, deferred replies wait until release_replies(), which posts them to the broker
  // from the calling thread (as a weight server's loader thread would).
  void hold_replies();
  void release_replies();

  // Thread-safe views for tests.
  std::vector<Event> connects() const;
  std::vector<Event> disconnects() const;
  int leases() const;
  int late_completions_refused() const;
  std::size_t parked_replies() const;

 private:
  broker::Reply import(broker::Session& session, const ipc::Request& request);
  // Answers `request` later with `make_reply()`, run on the loop thread.
  broker::Reply later(broker::Session& session, const ipc::Request& request,
                      std::function<broker::Reply()> make_reply);

  mutable std::mutex mutex_;
  bool replies_held_ = false;
  broker::Broker* broker_ = nullptr;
  std::vector<std::function<void()>> parked_;
  std::map<broker::ClientId, int> leases_;
  std::vector<Event> connects_;
  std::vector<Event> disconnects_;
  int late_completions_refused_ = 0;
};

}  // namespace hearth::test
