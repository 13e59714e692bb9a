#include "gateway/error_mapping.h"

#include "gateway/http/server.h"

namespace hearth::gateway {

namespace {

// The code a status always carries (error_mapping.h), where the thrower gave none.
std::string code_of_status(int status) {
  switch (status) {
    case 401:
      return "invalid_api_key";
    case 429:
      return "rate_limit_exceeded";
    default:
      return "";
  }
}

}  // namespace

void send_error(http::Response& res, const ApiError& e) {
  res.status = e.status();
  if (e.retry_after_s()) res.set_header("Retry-After", std::to_string(*e.retry_after_s()));
  ApiError coded = e;
  if (coded.code().empty()) coded.with_code(code_of_status(e.status()));
  res.set_content(coded.body().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
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
