#include "worker/engine/cache_domain.h"

#include <xxhash.h>

#include <string>

namespace hearth {

BlockKey cache_domain_key(const EngineOptions& options, std::string_view backend_name,
                          std::string_view model_identity) {
  // One line per field, so no two different settings can spell the same text.
  std::string text = "hearth cache domain v1\n";
  auto field = [&](std::string_view name, std::string_view value) {
    text.append(name).append("=").append(std::to_string(value.size())).append(":");
    text.append(value).append("\n");
  };
  field("model", model_identity);
  field("backend", backend_name);
  // Each option by its profile name, so the keys stay those of the string options before.
  field("cuda_engine", option_name(options.cuda_engine));
  field("kv_cache_dtype", option_name(options.kv_cache_dtype));
  field("decode_gemv", option_name(options.decode_gemv));
  field("weights_layout", option_name(options.weights_layout));
  field("batch_invariant", options.batch_invariant ? "true" : "false");
  // Only when sharded, so that every TP=1 key stays what it was.
  if (options.tensor_parallel > 1)
    field("tensor_parallel", std::to_string(options.tensor_parallel));
  const XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
  return {h.low64, h.high64};
}

BlockKey rank_key(const BlockKey& key, int rank) {
  const std::string text = "hearth tensor parallel rank key v1\n" + std::to_string(key.low) + " " +
                           std::to_string(key.high) + "\nrank=" + std::to_string(rank) + "\n";
  const XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
  return {h.low64, h.high64};
}

}  // namespace hearth
