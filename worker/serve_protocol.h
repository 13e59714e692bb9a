// The bodies of a serving worker's requests (engine_server.h), checked before anything is
// queued: each op takes exactly its own fields, of the right type and size; anything else is
// ProtocolError(kBadRequest) naming the op and the field. The submit's request object itself is
// read by request_from_json (request_file.h) with submit_request, off the loop thread. Kept
// apart from the server, free of sockets, so the fuzz target runs exactly this code.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "worker/engine/engine.h"
#include "worker/engine/request.h"
#include "worker/iteration_tokens.h"

namespace hearth {

class Tokenizer;

// submit {"request": {...}}: the request object (not yet read).
const nlohmann::json& submit_request_object(const nlohmann::json& body);
// cancel {"request_id": ID}: the id, a non-empty string of at most ipc::kMaxRequestIdBytes.
std::string cancel_request_id(const nlohmann::json& body);
// events {} and stats {}: no arguments.
void check_no_arguments(const nlohmann::json& body, std::string_view op);
// The request object of a submit, as the engine takes it: request_from_json's refusals become
// ProtocolError(kBadRequest) with its message.
Request submit_request(nlohmann::json request, const RequestSettings& defaults,
                       const Tokenizer* tokenizer);
// The stats reply: the engine's counters ("aborted": requests cancelled, by cancel or a
// disconnect; "held": requests held for a slow reader) and, from a serving loop, the tokens of
// its steps ("iteration_tokens": {"counts": per bucket of kIterationTokenBuckets and one above,
// "sum"}).
nlohmann::json stats_json(const EngineStats& stats);
nlohmann::json stats_json(const EngineStats& stats, const IterationTokens& iteration_tokens);

}  // namespace hearth
