#include "gateway/http/server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "gateway/http/connection.h"

namespace hearth::http {

Server::Server(ServerOptions options) {
  service_.options = options;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error(std::string("cannot create the server's stop pipe: ") +
                             std::strerror(errno));
  stop_read_.reset(fds[0]);
  stop_write_.reset(fds[1]);
  service_.stop_fd = stop_read_.get();
}

Server::~Server() {
  stop();
}

int Server::bind(const std::string& host, int port) {
  const std::string where = host + ":" + std::to_string(port);
  if (port < 0 || port > 65535)
    throw std::runtime_error("cannot listen on " + where + ": bad port");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(),
                               &hints, &found);
  if (rc != 0) throw std::runtime_error("cannot listen on " + where + ": " + gai_strerror(rc));
  std::string why = "no address";
  for (addrinfo* a = found; a; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd) {
      why = std::strerror(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), SOMAXCONN) != 0) {
      why = std::strerror(errno);
      continue;
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
    const int bound = addr.ss_family == AF_INET6
                          ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                          : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    listen_fd_ = std::move(fd);
    ::freeaddrinfo(found);
    return bound;
  }
  ::freeaddrinfo(found);
  throw std::runtime_error("cannot listen on " + where + ": " + why);
}

void Server::run() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || !listen_fd_) return;
    running_ = true;
  }
  const size_t max = size_t(std::max(1, service_.options.max_connections));
  while (true) {
    {
      // At max_connections, stop accepting: the next client waits in the accept queue.
      std::unique_lock lock(mu_);
      slot_cv_.wait(lock, [&] { return stopping_ || active_ < max; });
      if (stopping_) break;
    }
    pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0}, {stop_read_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) break;
    if (fds[1].revents) break;
    if (!(fds[0].revents & POLLIN)) continue;
    UniqueFd client(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!client) {
      // Out of descriptors: wait a little (or for stop) rather than spin on the ready socket.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        pollfd s{stop_read_.get(), POLLIN, 0};
        ::poll(&s, 1, 100);
      }
      continue;
    }
    const int one = 1;  // SSE chunks are small and must leave at once
    ::setsockopt(client.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ++service_.stats.connections;
    std::lock_guard lock(mu_);
    ++active_;
    pending_.push_back(std::move(client));
    if (pending_.size() > idle_ && threads_.size() < max)
      threads_.emplace_back([this] { worker(); });
    work_cv_.notify_one();
  }
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    pending_.clear();
    threads.swap(threads_);
  }
  work_cv_.notify_all();
  for (std::thread& t : threads) t.join();
  listen_fd_.reset();
  std::lock_guard lock(mu_);
  running_ = false;
  done_cv_.notify_all();
}

void Server::worker() {
  while (true) {
    UniqueFd fd;
    {
      std::unique_lock lock(mu_);
      ++idle_;
      work_cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      --idle_;
      if (stopping_) return;
      fd = std::move(pending_.front());
      pending_.pop_front();
    }
    Connection(std::move(fd), service_).serve();
    std::lock_guard lock(mu_);
    --active_;
    slot_cv_.notify_one();
  }
}

void Server::stop() {
  std::unique_lock lock(mu_);
  stopping_ = true;
  const char byte = 1;
  // Never drained: every poll on the pipe wakes from now on.
  [[maybe_unused]] const ssize_t n = ::write(stop_write_.get(), &byte, 1);
  slot_cv_.notify_all();
  work_cv_.notify_all();
  done_cv_.wait(lock, [&] { return !running_; });
}

}  // namespace hearth::http
