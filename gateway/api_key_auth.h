// The gateway's one credential: with an API key configured, the OpenAI and tokenizer paths need
// "Authorization: Bearer KEY" (401 otherwise); /health and /metrics stay open for probes.
#pragma once

#include <optional>
#include <string>

namespace hearth::http {
class Server;
}

namespace hearth::gateway {

// Installs the check as the server's pre-routing hook; no key, no check.
void require_api_key(http::Server& server, std::optional<std::string> api_key);

}  // namespace hearth::gateway
