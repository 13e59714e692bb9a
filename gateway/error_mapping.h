// How the gateway's failures reach an HTTP client: an ApiError as OpenAI's error body with its
// status, the statuses the HTTP server answers itself with the same shape, anything else a 500.
#pragma once

#include "gateway/api_error.h"
#include "gateway/http/message.h"

namespace hearth::http {
class Server;
}

namespace hearth::gateway {

// Never throws for any message: ApiError::body() holds only valid UTF-8.
void send_error(http::Response& res, const ApiError& e);

// Installs the server's error and exception hooks.
void map_errors(http::Server& server);

}  // namespace hearth::gateway
