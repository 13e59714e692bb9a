#include "gateway/api_key_auth.h"

#include "gateway/error_mapping.h"
#include "gateway/http/server.h"

namespace hearth::gateway {

namespace {

bool protected_path(const std::string& path) {
  return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
}

}  // namespace

void require_api_key(http::Server& server, std::optional<std::string> api_key) {
  if (!api_key) return;
  server.set_pre_routing_handler(
      [expected = "Bearer " + *api_key](const http::Request& req, http::Response& res) {
        if (protected_path(req.path) && req.get_header_value("Authorization") != expected) {
          send_error(res, ApiError(401, "authentication_error",
                                   "a valid API key is required (Authorization: Bearer KEY)"));
          return http::HandlerResponse::Handled;
        }
        return http::HandlerResponse::Unhandled;
      });
}

}  // namespace hearth::gateway
