// What one request asks for: how to sample, how long to go on, when to stop. Requests with
// different settings share a worker and, with batching, a forward pass.
#pragma once

#include <string>
#include <vector>

#include "worker/engine/sampler.h"

namespace hearth {

struct RequestSettings {
  SamplingParams sampling;
  int max_tokens = 256;
  std::vector<std::string> stop;  // stop strings; the text is cut before the first one
  bool ignore_eos = false;
};

}  // namespace hearth
