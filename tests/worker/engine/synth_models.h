// Synthetic models for the engine tests, written fresh by each test process into its own
// scratch directory (ctest runs a binary's tests in parallel processes).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/temp_dir.h"
#include "tools/synth_model.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/model/host_store.h"
#include "weight-server/model/dtype.h"
#include "weight-server/model/safetensors.h"

namespace hearth::test {

// 8 query heads over 2 KV heads of 64, 512 channels, 1,024 in the MLP, 3,000 words, 2 layers:
// the GPU engines' model (tiny-llama3), small but with real GQA; tensor_parallel 2 gives each
// rank 4 query heads, one KV head, 512 MLP channels and 1,500 words.
inline nlohmann::json small_gqa_config() {
  return {{"hidden_size", 512},    {"num_attention_heads", 8},  {"num_key_value_heads", 2},
          {"head_dim", 64},        {"intermediate_size", 1024}, {"vocab_size", 3000},
          {"num_hidden_layers", 2}};
}

// Production head shapes on small models, for the GPU engines against the CPU: head_dim 128
// with GQA 4 (tiny-llama3), head_dim 64 with GQA 7 and biases (tiny-qwen2), and head_dim 128
// with Qwen3's head norm (tiny-qwen3).
struct HeadShapeModel {
  std::string name;
  nlohmann::json config;  // config.json keys to replace
  std::string preset;
};
inline std::vector<HeadShapeModel> production_head_shapes() {
  const nlohmann::json hd128 = {{"hidden_size", 512},        {"num_attention_heads", 4},
                                {"num_key_value_heads", 1},  {"head_dim", 128},
                                {"intermediate_size", 1024}, {"vocab_size", 3000}};
  const nlohmann::json hd64 = {{"hidden_size", 448},
                               {"num_attention_heads", 7},
                               {"num_key_value_heads", 1},
                               {"intermediate_size", 896},
                               {"vocab_size", 2000}};
  return {{"hd128", hd128, "tiny-llama3"},
          {"hd64", hd64, "tiny-qwen2"},
          {"qwen3", hd128, "tiny-qwen3"}};
}

// A preset with config.json keys replaced; the other options at their defaults.
inline SynthOptions synth_options(const std::string& preset, nlohmann::json overrides = {}) {
  SynthOptions opt;
  opt.preset = preset;
  opt.config_overrides = std::move(overrides);
  return opt;
}

// Writes the model `opt` describes to <process scratch dir>/<name>, replacing what was there.
inline std::filesystem::path synth_dir(const std::string& name, const SynthOptions& opt) {
  const std::filesystem::path dir = process_scratch_dir() / name;
  std::filesystem::remove_all(dir);
  write_synthetic_model(dir, opt);
  return dir;
}

// The same model, opened as the CPU engine's weights.
inline std::shared_ptr<const WeightStore> synth_host_store(const std::string& name,
                                                           const SynthOptions& opt) {
  return std::make_shared<HostStore>(
      std::make_shared<HfModel>(HfModel::open(synth_dir(name, opt))));
}

// Sets every value of tensor `name` in the model's one model.safetensors to NaN, every other
// byte kept: a checkpoint whose weights overflowed, which opens and loads like any other.
inline void poison_with_nan(const std::filesystem::path& dir, const std::string& name) {
  const std::filesystem::path file = dir / "model.safetensors";
  SafetensorsEntry found;
  {
    const SafetensorsFile safetensors = SafetensorsFile::open(file);
    for (const SafetensorsEntry& e : safetensors.header().tensors)
      if (e.info.name == name) found = e;
  }
  if (found.info.bytes == 0) throw std::runtime_error(file.string() + " holds no " + name);
  // A quiet NaN of the tensor's type, as the loader's conversions write one.
  const float f32 = std::numeric_limits<float>::quiet_NaN();
  const DType t = found.info.dtype;
  if (t != DType::F32 && t != DType::F16 && t != DType::BF16)
    throw std::runtime_error(name + ": poison_with_nan takes 16- and 32-bit tensors");
  const uint16_t half = t == DType::F16 ? f32_to_f16(f32) : f32_to_bf16(f32);
  const size_t size = dtype_size(t);
  std::vector<char> nan(found.info.bytes);
  for (size_t i = 0; i < nan.size(); i += size)
    std::memcpy(&nan[i], size == 4 ? static_cast<const void*>(&f32) : &half, size);
  std::fstream out(file, std::ios::in | std::ios::out | std::ios::binary);
  out.seekp(std::streamoff(found.file_offset));
  out.write(nan.data(), std::streamsize(nan.size()));
  if (!out) throw std::runtime_error(file.string() + ": cannot rewrite " + name);
}

}  // namespace hearth::test
