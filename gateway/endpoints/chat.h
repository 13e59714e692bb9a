// POST /v1/chat/completions, and the model's chat template over a conversation (which
// /tokenize renders too).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "gateway/model_catalog.h"

namespace hearth::http {
class Server;
}

namespace hearth::gateway {

class Generation;

// The prompt text the model's template makes of `messages`. Throws ApiError 400 when the model
// has no usable template or the template refuses the messages.
std::string render_chat(const ModelEntry& model, const nlohmann::ordered_json& messages,
                        bool add_generation_prompt, const nlohmann::ordered_json& extra);

void add_chat_endpoint(http::Server& server, Generation& generation);

}  // namespace hearth::gateway
