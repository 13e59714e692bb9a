// Seeded synthetic models written as Hugging Face directories (config.json, safetensors,
// tokenizer files) for every supported architecture, from tiny test sizes to the shapes of
// Llama-3.1-8B. Values come from a counter-based hash of (seed, tensor, element): the same seed
// gives the same bytes whatever the thread count, and large models are written in parallel.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "weight-server/model/dtype.h"
#include "weight-server/model/model_config.h"

namespace hearth {

struct SynthOptions {
  std::string preset = "tiny-llama";
  DType dtype = DType::BF16;  // of every tensor, or (with fp8) of those left unquantized
  // The seven decoder projections in fp8 with F32 [out, 1] scales (compressed-tensors
  // FP8-dynamic): the same seed's `dtype` weights quantized row by row (fp8_quantize.h).
  bool fp8 = false;
  uint64_t seed = 0;
  double shard_gb = 0;  // > 0: shards of about this size plus an index
  // A real tokenizer.json (or a directory holding one, with its tokenizer_config.json) instead
  // of the generated one; vocab_size grows to hold its ids, BOS/EOS follow its config.
  std::string tokenizer_path;
  int threads = 0;                  // 0: one per core
  bool progress = false;            // progress lines on stderr
  nlohmann::json config_overrides;  // config.json keys to replace (set_config_key)
};

// "KEY=VALUE" into options.config_overrides (base/key_value_setting.h: VALUE as JSON where it
// parses, else as a string). A preset's widths in fewer layers (num_hidden_layers=2) load in
// seconds and still run the big model's kernel shapes. Throws std::invalid_argument for an empty
// KEY or no
// '='; the values themselves are checked with the rest of the config when the model is written.
void set_config_key(SynthOptions& options, const std::string& key_value);

struct SynthResult {
  ModelConfig config;
  uint64_t bytes = 0;
  double seconds = 0;
};

std::vector<std::string> synth_presets();

SynthResult write_synthetic_model(const std::filesystem::path& dir, const SynthOptions& options);

}  // namespace hearth
