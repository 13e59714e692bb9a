// One request run to completion: the single-prompt command line, tests and tools. It is the
// engine (engine.h) with one request, so its tokens are exactly those the request gets among
// many.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "worker/engine/backend.h"
#include "worker/engine/engine_options.h"
#include "worker/engine/request_output.h"
#include "worker/engine/request_settings.h"

namespace hearth {

class Tokenizer;

struct GenerationRequest {
  std::vector<int32_t> prompt;
  RequestSettings settings;
  std::vector<int32_t> eos_ids;
};

struct Generation {
  std::vector<TokenOutput> tokens;
  FinishOutput finish;
};

// Runs `request` alone on `backend`, calling `on_output` (if set) as tokens arrive. `tokenizer`
// may be null (token ids only; stop strings then never match). Throws RequestError when the
// engine refuses the request.
Generation generate(Backend& backend, const Tokenizer* tokenizer, const GenerationRequest& request,
                    const std::function<void(const RequestOutput&)>& on_output = {},
                    const EngineOptions& options = {});

}  // namespace hearth
