// How the gateway's failures reach an HTTP client: an ApiError as OpenAI's error body with its
// status, the statuses the HTTP server answers itself with the same shape, anything else a 500.
//
// Every error kind, as OpenAI says it (clients and LangChain/LiteLLM match type and code):
//   400 invalid_request_error, param the field; code "context_length_exceeded" for a prompt
//       and max_tokens over the context (vLLM's "maximum context length is N tokens" wording),
//       "tensor_parallel_mismatch" for a profile whose degree is not its model's sharding
//   401 authentication_error, code "invalid_api_key"
//   404 invalid_request_error: an unknown model or profile, param "model", code
//       "model_not_found"; an unknown path, no code
//   405, 408, 411, 413, 415, 431 invalid_request_error (the HTTP server's own), no code
//   429 rate_limit_error, code "rate_limit_exceeded", with Retry-After
//   500 server_error: a failure that retrying will not mend, never with Retry-After
//   503 server_error with Retry-After: only what passes (a worker restarting, shutting down)
//   504 timeout_error
// Messages never hold the gateway's internal request ids.
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
