#include "gateway/error_mapping.h"

#include "gateway/http/server.h"

namespace hearth::gateway {

void send_error(http::Response& res, const ApiError& e) {
  res.status = e.status();
  if (e.retry_after_s()) res.set_header("Retry-After", std::to_string(*e.retry_after_s()));
  res.set_content(e.body().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                  "application/json");
}

void map_errors(http::Server& server) {
  // Statuses the server answers itself (400, 404, 405, 408, 413, 431, ...) get OpenAI bodies
  // naming what was wrong.
  server.set_error_handler([](const http::Request&, http::Response& res) {
    if (!res.body.empty()) return;
    const std::string message =
        res.error_message.empty() ? "HTTP " + std::to_string(res.status) : res.error_message;
    res.set_content(ApiError(res.status, "invalid_request_error", message).body().dump(),
                    "application/json");
  });

  server.set_exception_handler(
      [](const http::Request&, http::Response& res, std::exception_ptr ep) {
        try {
          std::rethrow_exception(ep);
        } catch (const ApiError& e) {
          send_error(res, e);
        } catch (const std::exception& e) {
          send_error(res, ApiError(500, "server_error", e.what()));
        } catch (...) {
          send_error(res, ApiError(500, "server_error", "unknown failure"));
        }
      });
}

}  // namespace hearth::gateway
