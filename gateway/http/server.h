// hearth's HTTP/1.1 server: blocking sockets with poll() deadlines, one thread per connection
// from a pool of at most max_connections (connections beyond it wait in the kernel's accept
// queue, listened with a SOMAXCONN backlog). The API keeps the names of the parts of
// cpp-httplib the gateway used: Get/Post routes, pre-routing, error and exception hooks.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gateway/http/service.h"
#include "base/unique_fd.h"

namespace hearth::http {

class Server {
 public:
  explicit Server(ServerOptions options = {});
  ~Server();  // stops and joins
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  void Get(const std::string& path, Handler h) { service_.router.add("GET", path, std::move(h)); }
  void Post(const std::string& path, Handler h) { service_.router.add("POST", path, std::move(h)); }
  void route(const std::string& method, const std::string& path, Handler h) {
    service_.router.add(method, path, std::move(h));
  }
  void set_pre_routing_handler(PreRoutingHook h) { service_.pre_routing = std::move(h); }
  void set_error_handler(ErrorHook h) { service_.on_error = std::move(h); }
  void set_exception_handler(ExceptionHook h) { service_.on_exception = std::move(h); }

  // Binds and listens; port 0 picks a free one. Returns the port; throws std::runtime_error
  // naming the address when it cannot.
  int bind(const std::string& host, int port);
  // Accepts and serves until stop(). Returns once every connection thread has ended.
  void run();
  // From any thread, any number of times: wakes every wait, and returns once run() has
  // returned (at once when run() is not running).
  void stop();

  const ServerStats& stats() const { return service_.stats; }

 private:
  void worker();

  Service service_;
  UniqueFd listen_fd_;
  UniqueFd stop_read_, stop_write_;

  std::mutex mu_;
  std::condition_variable work_cv_;  // a connection to serve, or stopping
  std::condition_variable slot_cv_;  // a connection ended (room to accept another)
  std::condition_variable done_cv_;  // run() returned
  std::deque<UniqueFd> pending_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;    // threads waiting for a connection
  size_t active_ = 0;  // connections accepted and not yet ended
  bool stopping_ = false;
  bool running_ = false;
};

}  // namespace hearth::http
