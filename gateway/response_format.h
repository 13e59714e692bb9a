// Structured output as OpenAI and vLLM ask for it: `response_format` ({"type": "text"},
// {"type": "json_object"}, {"type": "json_schema", "json_schema": {"name", "schema", "strict",
// "description"}}) and vLLM's extras `guided_json` (a schema) and `guided_regex`, read into
// the engine's setting (request_settings.h) and written into the worker's request. The schema
// itself is compiled, and refused by keyword, by the worker's engine (a 400 like any setting).
#pragma once

#include <nlohmann/json.hpp>

#include "gateway/request_json.h"
#include "worker/engine/request_settings.h"

namespace hearth::gateway {

// From the request body `b`; at most one of the three fields may ask for a format. Throws a
// 400 naming the field.
StructuredOutput read_structured_output(const Field& b);

// The worker request's keys for `s` (guided_json, guided_regex, guided_json_object, and
// guided_prefix / guided_suffix around them); none for text.
void put_structured_output(nlohmann::json& worker_request, const StructuredOutput& s);

}  // namespace hearth::gateway
