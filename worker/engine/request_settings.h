// What one request asks for: how to sample, how long to go on, when to stop, what to report.
// Requests with different settings share a worker and a forward pass.
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
  int logprobs = 0;        // also report the N most likely tokens of each step (0: only the
                           // chosen token's logprob, which every token event carries)
  std::string cache_salt;  // prefix caching: requests share cached KV only with the same salt
};

}  // namespace hearth
