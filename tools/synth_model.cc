#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/key_value_setting.h"
#include "tools/synth_model.h"
#include "tools/synth_real_tokenizer.h"
#include "tools/synth_tokenizer.h"
#include "weight-server/model/dtype.h"
#include "weight-server/model/fp8_quantize.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/model/model_config.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using hearth::DType;
using hearth::ExpectedTensor;

// Llama 3's RoPE scaling as its config.json writes it: `factor` stretches the positions
// trained on (`original_max_positions`), low and high frequency factors 1 and 4.
json llama3_rope_scaling(double factor, int original_max_positions) {
  return {{"rope_type", "llama3"},
          {"factor", factor},
          {"low_freq_factor", 1.0},
          {"high_freq_factor", 4.0},
          {"original_max_position_embeddings", original_max_positions}};
}

// A Llama 3.1 model (8B, 70B, ...): the family shares its vocabulary, 8 KV heads of 128,
// 128K positions and RoPE scaling; the sizes are each model's.
json llama31(int hidden, int intermediate, int layers, int heads) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", hidden},
          {"intermediate_size", intermediate},
          {"num_hidden_layers", layers},
          {"num_attention_heads", heads},
          {"num_key_value_heads", 8},
          {"head_dim", 128},
          {"vocab_size", 128256},
          {"max_position_embeddings", 131072},
          {"rope_theta", 500000.0},
          {"rope_scaling", llama3_rope_scaling(8.0, 8192)},
          {"tie_word_embeddings", false}};
}

// Config fields as transformers writes them; parsed back through hearth's own parser so a
// preset can never describe something the engine would refuse.
const std::map<std::string, json>& presets() {
  static const std::map<std::string, json> table = {
      {"tiny-llama",
       {{"architectures", {"LlamaForCausalLM"}},
        {"model_type", "llama"},
        {"hidden_size", 64},
        {"intermediate_size", 176},
        {"num_hidden_layers", 2},
        {"num_attention_heads", 4},
        {"num_key_value_heads", 2},
        {"vocab_size", 512},
        {"max_position_embeddings", 1024},
        {"rope_theta", 10000.0},
        {"tie_word_embeddings", false}}},
      {"tiny-llama3",
       {{"architectures", {"LlamaForCausalLM"}},
        {"model_type", "llama"},
        {"hidden_size", 64},
        {"intermediate_size", 192},
        {"num_hidden_layers", 2},
        {"num_attention_heads", 4},
        {"num_key_value_heads", 1},
        {"vocab_size", 512},
        {"max_position_embeddings", 2048},
        {"rope_theta", 500000.0},
        {"rope_scaling", llama3_rope_scaling(8.0, 256)},
        {"tie_word_embeddings", true}}},
      {"tiny-mistral",
       {{"architectures", {"MistralForCausalLM"}},
        {"model_type", "mistral"},
        {"hidden_size", 64},
        {"intermediate_size", 160},
        {"num_hidden_layers", 2},
        {"num_attention_heads", 8},
        {"num_key_value_heads", 2},
        {"vocab_size", 512},
        {"max_position_embeddings", 2048},
        {"sliding_window", 1024},
        {"rope_theta", 1000000.0},
        {"tie_word_embeddings", false}}},
      {"tiny-qwen2",
       {{"architectures", {"Qwen2ForCausalLM"}},
        {"model_type", "qwen2"},
        {"hidden_size", 64},
        {"intermediate_size", 128},
        {"num_hidden_layers", 2},
        {"num_attention_heads", 4},
        {"num_key_value_heads", 2},
        {"vocab_size", 512},
        {"max_position_embeddings", 1024},
        {"rope_theta", 1000000.0},
        {"tie_word_embeddings", true},
        {"use_sliding_window", false}}},
      {"tiny-qwen3",
       {{"architectures", {"Qwen3ForCausalLM"}},
        {"model_type", "qwen3"},
        {"hidden_size", 64},
        {"intermediate_size", 128},
        {"num_hidden_layers", 2},
        {"num_attention_heads", 4},
        {"num_key_value_heads", 2},
        {"head_dim", 32},
        {"vocab_size", 512},
        {"max_position_embeddings", 1024},
        {"rope_theta", 1000000.0},
        {"tie_word_embeddings", true}}},
      {"llama-3.2-1b",
       {{"architectures", {"LlamaForCausalLM"}},
        {"model_type", "llama"},
        {"hidden_size", 2048},
        {"intermediate_size", 8192},
        {"num_hidden_layers", 16},
        {"num_attention_heads", 32},
        {"num_key_value_heads", 8},
        {"head_dim", 64},
        {"vocab_size", 128256},
        {"max_position_embeddings", 131072},
        {"rope_theta", 500000.0},
        {"rope_scaling", llama3_rope_scaling(32.0, 8192)},
        {"tie_word_embeddings", true}}},
      {"llama-3.1-8b", llama31(4096, 14336, 32, 32)},
      // Llama 3.1 70B's shape (141 GB in bf16): tensor parallelism's big model (issue 26).
      {"llama-3.1-70b", llama31(8192, 28672, 80, 64)},
      {"mistral-7b",
       {{"architectures", {"MistralForCausalLM"}},
        {"model_type", "mistral"},
        {"hidden_size", 4096},
        {"intermediate_size", 14336},
        {"num_hidden_layers", 32},
        {"num_attention_heads", 32},
        {"num_key_value_heads", 8},
        {"head_dim", 128},
        {"vocab_size", 32768},
        {"max_position_embeddings", 32768},
        {"rope_theta", 1000000.0},
        {"sliding_window", nullptr},
        {"tie_word_embeddings", false}}},
      {"qwen2.5-0.5b",
       {{"architectures", {"Qwen2ForCausalLM"}},
        {"model_type", "qwen2"},
        {"hidden_size", 896},
        {"intermediate_size", 4864},
        {"num_hidden_layers", 24},
        {"num_attention_heads", 14},
        {"num_key_value_heads", 2},
        {"vocab_size", 151936},
        {"max_position_embeddings", 32768},
        {"rope_theta", 1000000.0},
        {"tie_word_embeddings", true},
        {"use_sliding_window", false}}},
      {"qwen3-0.6b",
       {{"architectures", {"Qwen3ForCausalLM"}},
        {"model_type", "qwen3"},
        {"hidden_size", 1024},
        {"intermediate_size", 3072},
        {"num_hidden_layers", 28},
        {"num_attention_heads", 16},
        {"num_key_value_heads", 8},
        {"head_dim", 128},
        {"vocab_size", 151936},
        {"max_position_embeddings", 40960},
        {"rope_theta", 1000000.0},
        {"tie_word_embeddings", true}}},
  };
  return table;
}

// splitmix64: a cheap, well-mixed hash of a 64-bit counter.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1) from element i of tensor `stream`.
float uniform(uint64_t seed, uint64_t stream, uint64_t i) {
  const uint64_t h = mix(mix(seed ^ (stream * 0xD1B54A32D192ED03ull)) + i);
  return float(int64_t(h >> 40) - (1ll << 23)) / float(1 << 23);
}

struct TensorPlan {
  hearth::ExpectedTensor spec;
  DType dtype = DType::BF16;
  uint64_t stream = 0;      // which values: the tensor's index in the unquantized model
  size_t scale_tensor = 0;  // an fp8 weight's scale tensor (the next one)
  uint64_t offset = 0;      // within its shard's data section
  uint64_t bytes = 0;
  int shard = 0;
  // Values are centre + spread * uniform: unit-variance rows for matrices, ~1 for norms.
  float centre = 0.0f, spread = 0.0f;
};

void plan_values(TensorPlan& t) {
  const auto& name = t.spec.name;
  if (t.spec.shape.size() == 1) {
    const bool norm = name.find("norm") != std::string::npos;
    t.centre = norm ? 1.0f : 0.0f;
    t.spread = norm ? 0.1f : 0.2f;
  } else if (name == "model.embed_tokens.weight") {
    t.spread = 1.0f;
  } else {
    t.spread = std::sqrt(3.0f / float(t.spec.shape[1]));  // unit output variance
  }
}

void store(std::byte* out, DType dtype, uint64_t i, float v) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(out + 4 * i, &v, 4);
      break;
    case DType::F16: {
      const uint16_t h = hearth::f32_to_f16(v);
      std::memcpy(out + 2 * i, &h, 2);
      break;
    }
    case DType::BF16: {
      const uint16_t h = hearth::f32_to_bf16(v);
      std::memcpy(out + 2 * i, &h, 2);
      break;
    }
    case DType::F8_E4M3:
      // fp8 is made from bf16 rows with their scales (write_synthetic_model), never per value.
      throw std::logic_error("synth: fp8 values are quantized per row, not stored one by one");
  }
}

std::string header_bytes(const std::vector<TensorPlan>& tensors, int shard) {
  json h = json::object();
  h["__metadata__"] = {{"format", "pt"}, {"generator", "hearth-synth"}};
  for (const TensorPlan& t : tensors) {
    if (t.shard != shard) continue;
    h[t.spec.name] = {{"dtype", std::string(hearth::dtype_name(t.dtype))},
                      {"shape", t.spec.shape},
                      {"data_offsets", {t.offset, t.offset + t.bytes}}};
  }
  std::string text = h.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');  // keep data 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = char((uint64_t(text.size()) >> (8 * i)) & 0xff);
  return out + text;
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error(path.string() + ": write failed");
}

}  // namespace

namespace hearth {

void set_config_key(SynthOptions& options, const std::string& key_value) {
  std::optional<KeyValueSetting> kv = parse_key_value_setting(key_value);
  if (!kv) throw std::invalid_argument("config setting '" + key_value + "' is not KEY=VALUE");
  if (!options.config_overrides.is_object()) options.config_overrides = json::object();
  options.config_overrides[kv->key] = std::move(kv->value);
}

std::vector<std::string> synth_presets() {
  std::vector<std::string> names;
  for (const auto& [name, _] : presets()) names.push_back(name);
  return names;
}

SynthResult write_synthetic_model(const fs::path& out_dir, const SynthOptions& opt) {
  auto preset_it = presets().find(opt.preset);
  if (preset_it == presets().end()) throw std::runtime_error("unknown preset '" + opt.preset + "'");
  const DType dtype = opt.dtype;
  if (dtype_is_scaled(dtype))
    throw std::runtime_error("hearth-synth: fp8 is an option over a 16- or 32-bit dtype");
  const char* torch_dtype = dtype == DType::BF16  ? "bfloat16"
                            : dtype == DType::F16 ? "float16"
                                                  : "float32";

  json config = preset_it->second;
  config["hidden_act"] = "silu";
  config["rms_norm_eps"] = 1e-5;
  config["torch_dtype"] = torch_dtype;
  if (opt.fp8) config["quantization_config"] = quantization_config_json(kFp8PerChannel);
  if (opt.config_overrides.is_object())
    for (const auto& [k, v] : opt.config_overrides.items()) config[k] = v;
  // A real tokenizer's ids must all have an embedding row: a preset too small for them grows
  // (models pad their vocabularies, so a larger one is kept).
  std::optional<RealTokenizer> real;
  if (!opt.tokenizer_path.empty()) {
    real = read_real_tokenizer(opt.tokenizer_path);
    const int64_t vocab = config["vocab_size"].get<int64_t>();
    if (real->vocab_needed > vocab) {
      if (opt.config_overrides.is_object() && opt.config_overrides.contains("vocab_size"))
        throw std::runtime_error("vocab_size " + std::to_string(vocab) + " is too small for " +
                                 opt.tokenizer_path + " (its ids need " +
                                 std::to_string(real->vocab_needed) + ")");
      config["vocab_size"] = real->vocab_needed;
      if (opt.progress)
        std::fprintf(stderr, "hearth-synth: vocab_size %lld -> %lld for the tokenizer's ids\n",
                     static_cast<long long>(vocab), static_cast<long long>(real->vocab_needed));
    }
  }
  const SynthTokenizer tok = make_synth_tokenizer(int(config["vocab_size"]));
  const int64_t bos_id = real && real->bos_id ? *real->bos_id : tok.bos_id;
  const int64_t eos_id = real && real->eos_id ? *real->eos_id : tok.eos_id;
  config["bos_token_id"] = bos_id;
  config["eos_token_id"] = eos_id;
  const ModelConfig cfg = parse_model_config(config, opt.preset);

  std::vector<TensorPlan> tensors;
  uint64_t stream = 0;
  for (auto& spec : expected_tensors(cfg)) {
    using Role = ExpectedTensor::Role;
    TensorPlan t{spec};
    t.dtype = spec.role == Role::Fp8Weight  ? DType::F8_E4M3
              : spec.role == Role::Fp8Scale ? DType::F32
                                            : dtype;
    if (spec.role != Role::Fp8Scale) t.stream = stream++;
    t.scale_tensor = tensors.size() + 1;
    t.bytes = dtype_size(t.dtype);
    for (int64_t d : spec.shape) t.bytes *= uint64_t(d);
    plan_values(t);
    tensors.push_back(std::move(t));
  }
  // Assign shards greedily in order, then offsets within each shard.
  const uint64_t shard_limit = opt.shard_gb > 0 ? uint64_t(opt.shard_gb * 1e9) : UINT64_MAX;
  int shards = 1;
  uint64_t used = 0;
  for (TensorPlan& t : tensors) {
    if (used > 0 && used + t.bytes > shard_limit) {
      ++shards;
      used = 0;
    }
    t.shard = shards - 1;
    t.offset = used;
    used += t.bytes;
  }

  fs::create_directories(out_dir);
  auto shard_name = [&](int s) {
    if (shards == 1) return std::string("model.safetensors");
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", s + 1, shards);
    return std::string(buf);
  };
  std::vector<int> fds(shards, -1);
  std::vector<uint64_t> data_start(shards);
  auto close_all = [&] {
    bool ok = true;
    for (int& fd : fds)
      if (fd >= 0 && ::close(std::exchange(fd, -1)) != 0) ok = false;
    return ok;
  };
  try {
    for (int s = 0; s < shards; ++s) {
      const fs::path path = out_dir / shard_name(s);
      fds[s] = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fds[s] < 0) throw std::runtime_error(path.string() + ": cannot create");
      const std::string header = header_bytes(tensors, s);
      if (::write(fds[s], header.data(), header.size()) != ssize_t(header.size()))
        throw std::runtime_error(path.string() + ": write failed");
      data_start[s] = header.size();
    }
  } catch (...) {
    close_all();
    throw;
  }

  // Work items of at most 16 MiB; threads take them in turn.
  struct Chunk {
    size_t tensor;
    uint64_t first, count;
  };
  // An fp8 weight's chunks are whole rows, each written with its scale; a scale tensor has
  // no chunks of its own.
  std::vector<Chunk> chunks;
  uint64_t total_bytes = 0;
  for (size_t ti = 0; ti < tensors.size(); ++ti) {
    const TensorPlan& t = tensors[ti];
    total_bytes += t.bytes;
    if (t.spec.role == ExpectedTensor::Role::Fp8Scale) continue;
    const uint64_t n = t.bytes / dtype_size(t.dtype);
    uint64_t per_chunk = (16ull << 20) / dtype_size(t.dtype);
    if (t.dtype == DType::F8_E4M3) {
      const uint64_t cols = uint64_t(t.spec.shape[1]);
      per_chunk = std::max<uint64_t>(1, per_chunk / cols) * cols;
    }
    for (uint64_t first = 0; first < n; first += per_chunk)
      chunks.push_back({ti, first, std::min(per_chunk, n - first)});
  }

  std::atomic<size_t> next{0};
  std::atomic<uint64_t> written{0};
  std::atomic<bool> failed{false};
  const auto start = std::chrono::steady_clock::now();
  auto worker = [&] {
    std::vector<std::byte> buf(std::min<uint64_t>(16ull << 20, total_bytes));
    std::vector<std::byte> row;  // an fp8 weight's row in `dtype`, as the bf16 model has it
    std::vector<float> scales;   // and the scales of a chunk's rows
    for (size_t c; !failed && (c = next++) < chunks.size();) {
      const Chunk& ch = chunks[c];
      const TensorPlan& t = tensors[ch.tensor];
      const auto value = [&](uint64_t i) {
        return t.centre + t.spread * uniform(opt.seed, t.stream, i);
      };
      uint64_t bytes = ch.count * dtype_size(t.dtype);
      if (t.dtype == DType::F8_E4M3) {
        const uint64_t cols = uint64_t(t.spec.shape[1]), rows = ch.count / cols;
        row.resize(cols * dtype_size(dtype));
        scales.resize(rows);
        for (uint64_t r = 0; r < rows; ++r) {
          for (uint64_t i = 0; i < cols; ++i)
            store(row.data(), dtype, i, value(ch.first + r * cols + i));
          scales[r] = quantize_row_fp8(row.data(), dtype, int64_t(cols),
                                       reinterpret_cast<uint8_t*>(buf.data()) + r * cols);
        }
        const TensorPlan& s = tensors[t.scale_tensor];
        const uint64_t at = data_start[s.shard] + s.offset + ch.first / cols * 4;
        if (::pwrite(fds[s.shard], scales.data(), rows * 4, off_t(at)) != ssize_t(rows * 4))
          failed = true;
        bytes += rows * 4;
      } else {
        for (uint64_t i = 0; i < ch.count; ++i) store(buf.data(), t.dtype, i, value(ch.first + i));
      }
      const uint64_t code_bytes = ch.count * dtype_size(t.dtype);
      const uint64_t at = data_start[t.shard] + t.offset + ch.first * dtype_size(t.dtype);
      if (::pwrite(fds[t.shard], buf.data(), code_bytes, off_t(at)) != ssize_t(code_bytes))
        failed = true;
      const uint64_t done = written += bytes;
      if (opt.progress && done * 20 / total_bytes != (done - bytes) * 20 / total_bytes)
        std::fprintf(stderr, "hearth-synth: %3.0f%% of %.2f GB\n", 100.0 * done / total_bytes,
                     total_bytes / 1e9);
    }
  };
  const int threads =
      opt.threads > 0 ? opt.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(worker);
  for (auto& th : pool) th.join();
  if (!close_all() || failed)
    throw std::runtime_error(out_dir.string() + ": writing the weights failed (disk full?)");

  if (shards > 1) {
    json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", json::object()}};
    for (const TensorPlan& t : tensors) index["weight_map"][t.spec.name] = shard_name(t.shard);
    write_file(out_dir / "model.safetensors.index.json", index.dump(2));
  }
  write_file(out_dir / "config.json", config.dump(2));
  write_file(out_dir / "generation_config.json",
             json{{"bos_token_id", bos_id}, {"eos_token_id", eos_id}}.dump(2));
  if (!real) {
    write_file(out_dir / "tokenizer.json", tok.tokenizer_json);
    write_file(out_dir / "tokenizer_config.json", tok.tokenizer_config_json);
  } else {
    write_file(out_dir / "tokenizer.json", real->tokenizer_json);
    if (!real->tokenizer_config_json.empty())
      write_file(out_dir / "tokenizer_config.json", real->tokenizer_config_json);
  }
  return {cfg, total_bytes,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

}  // namespace hearth
