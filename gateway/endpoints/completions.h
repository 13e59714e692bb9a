// POST /v1/completions: text or token prompts, run like a chat but without a template.
#pragma once

namespace hearth::http {
class Server;
}

namespace hearth::gateway {

class Generation;

void add_completions_endpoint(http::Server& server, Generation& generation);

}  // namespace hearth::gateway
