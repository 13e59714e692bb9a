// A profile: everything that may differ between two workers sharing one model — sampling,
// limits and engine options. Read from a flat JSON object; an unknown key is an error, so a
// typo never silently falls back to a default. Command-line flags override profile values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/sampler.h"

namespace hearth {

struct Profile {
  std::string name;  // free-form label for reports
  SamplingParams sampling;
  int max_tokens = 256;
  std::vector<std::string> stop;  // stop strings; the text is cut before the first one
  bool ignore_eos = false;
  std::string backend = "auto";  // auto | cpu | cuda (auto: cuda when a GPU is present)
  int context_length = 0;        // 0: the model's maximum, capped at 4096

  // CUDA engine options. Those that change numerics are here so a proof run can show them.
  bool cuda_graphs = true;
  std::string kv_cache_dtype = "auto";        // auto (the weights' type) | bf16 | f16
  std::string weights_layout = "per-tensor";  // per-tensor | packed
  std::string decode_gemv = "hearth";         // hearth | cublas
};

// Applies the keys of `obj` to `profile` (starting from whatever it holds). Throws
// std::runtime_error naming the key on an unknown key, a wrong type or an out-of-range value.
void apply_profile_json(Profile& profile, const nlohmann::json& obj, const std::string& label);

Profile load_profile_file(const std::string& path);

nlohmann::json profile_to_json(const Profile& profile);

}  // namespace hearth
