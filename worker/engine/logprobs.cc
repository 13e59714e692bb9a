#include "worker/engine/logprobs.h"

#include <algorithm>
#include <cmath>

namespace hearth {

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int n) {
  n = std::clamp(n, 0, int(logits.size()));
  if (n == 0) return {};
  // The same max and double sum, in the same order, as token_logprob: equal values, bit for bit.
  float max = -INFINITY;
  for (float v : logits) max = std::max(max, v);
  double sum = 0.0;
  for (float v : logits) sum += std::exp(double(v) - max);
  const double log_sum = std::log(sum);

  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  std::vector<TokenLogprob> top(n);
  for (int i = 0; i < n; ++i)
    top[i] = {ids[i], static_cast<float>(double(logits[ids[i]]) - max - log_sum)};
  return top;
}

}  // namespace hearth
