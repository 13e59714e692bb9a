// What a connection needs from its server: the limits and timeouts, the routes and hooks, the
// stop pipe, and the counters tests read.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>

#include "gateway/http/request_parser.h"
#include "gateway/http/router.h"

namespace hearth::http {

struct ServerOptions {
  ParseLimits limits;
  int max_connections = 512;  // threads serving connections; more wait in the accept queue
  // The whole of one request (head and body), from its first byte: trickling a byte at a time
  // does not extend it (slowloris). 408 past it.
  std::chrono::milliseconds request_timeout{15'000};
  std::chrono::milliseconds keep_alive_timeout{5'000};  // idle between requests
  std::chrono::milliseconds write_timeout{30'000};      // each write of a response
};

enum class HandlerResponse { Handled, Unhandled };
using PreRoutingHook = std::function<HandlerResponse(const Request&, Response&)>;
// Fills the body of a status the server answers itself (400, 404, 405, 408, 413, 414, 417, 431,
// 501, 505; Response::error_message says what was wrong) or one a handler left empty.
using ErrorHook = std::function<void(const Request&, Response&)>;
using ExceptionHook = std::function<void(const Request&, Response&, std::exception_ptr)>;

struct ServerStats {
  std::atomic<uint64_t> bytes_read{0};       // parsed from client sockets
  std::atomic<uint64_t> bytes_discarded{0};  // read and dropped after a refusal
  std::atomic<uint64_t> requests{0};         // handed to a handler (or the pre-routing hook)
  std::atomic<uint64_t> connections{0};
};

struct Service {
  ServerOptions options;
  Router router;
  PreRoutingHook pre_routing;
  ErrorHook on_error;
  ExceptionHook on_exception;
  int stop_fd = -1;  // readable once the server stops
  ServerStats stats;
};

}  // namespace hearth::http
