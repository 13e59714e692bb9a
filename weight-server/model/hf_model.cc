#include "weight-server/model/hf_model.h"

#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "base/json_limits.h"
#include "base/utf8.h"
#include "weight-server/model/model_directory.h"

namespace hearth {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Shard file names from model.safetensors.index.json, in first-seen order.
std::vector<std::string> shard_names_from_index(const std::string& text,
                                                const fs::path& index_path) {
  json index = parse_json(text, index_path.string());
  auto map = index.find("weight_map");
  if (map == index.end() || !map->is_object() || map->empty())
    throw std::runtime_error(index_path.string() + ": missing or empty weight_map");
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const auto& [tensor, file] : map->items()) {
    if (!file.is_string())
      throw std::runtime_error(index_path.string() + ": weight_map entry for '" + tensor +
                               "' is not a file name");
    std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      throw std::runtime_error(index_path.string() + ": weight_map entry for '" + tensor +
                               "' names a file outside the model directory: " + f);
    if (seen.insert(f).second) names.push_back(f);
  }
  return names;
}

// A model's text files and its path travel to workers and clients inside JSON, which must be
// UTF-8: anything else is refused at load, not in every later reply.
void check_utf8(std::string_view text, const fs::path& path) {
  if (const auto at = find_invalid_utf8(text))
    throw std::runtime_error(path.string() + ": not valid UTF-8 (byte " + std::to_string(*at) +
                             "); model files travel to workers as JSON text, which must be UTF-8");
}

// The tensors of the unquantized architecture.
std::vector<ExpectedTensor> expected_plain_tensors(const ModelConfig& c) {
  using S = std::vector<int64_t>;
  std::vector<ExpectedTensor> out;
  const int64_t h = c.hidden, q = c.q_dim(), kv = c.kv_dim(), inter = c.intermediate;
  out.push_back({"model.embed_tokens.weight", S{c.vocab, h}});
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    out.push_back({p + "input_layernorm.weight", S{h}});
    out.push_back({p + "self_attn.q_proj.weight", S{q, h}});
    out.push_back({p + "self_attn.k_proj.weight", S{kv, h}});
    out.push_back({p + "self_attn.v_proj.weight", S{kv, h}});
    if (c.qkv_bias) {
      out.push_back({p + "self_attn.q_proj.bias", S{q}});
      out.push_back({p + "self_attn.k_proj.bias", S{kv}});
      out.push_back({p + "self_attn.v_proj.bias", S{kv}});
    }
    if (c.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", S{c.head_dim}});
      out.push_back({p + "self_attn.k_norm.weight", S{c.head_dim}});
    }
    out.push_back({p + "self_attn.o_proj.weight", S{h, q}});
    out.push_back({p + "post_attention_layernorm.weight", S{h}});
    out.push_back({p + "mlp.gate_proj.weight", S{inter, h}});
    out.push_back({p + "mlp.up_proj.weight", S{inter, h}});
    out.push_back({p + "mlp.down_proj.weight", S{h, inter}});
  }
  out.push_back({"model.norm.weight", S{h}});
  if (!c.tie_embeddings) out.push_back({"lm_head.weight", S{c.vocab, h}});
  return out;
}

}  // namespace

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c) {
  using S = std::vector<int64_t>;
  std::vector<ExpectedTensor> plain = expected_plain_tensors(c);
  if (!c.quantization.fp8()) return plain;
  std::vector<ExpectedTensor> out;
  for (ExpectedTensor& t : plain) {
    if (!is_quantized_projection(t.name)) {
      out.push_back(std::move(t));
      continue;
    }
    const bool channel = c.quantization.strategy == QuantizationConfig::Strategy::Channel;
    ExpectedTensor scale{t.name + "_scale", channel ? S{t.shape[0], 1} : S{1},
                         ExpectedTensor::Role::Fp8Scale};
    t.role = ExpectedTensor::Role::Fp8Weight;
    out.push_back(std::move(t));
    out.push_back(std::move(scale));
  }
  return out;
}

std::string tensor_mismatch(const ExpectedTensor& want, DType dtype,
                            const std::vector<int64_t>& shape, const char* implied) {
  using Role = ExpectedTensor::Role;
  const bool shape_ok =
      shape == want.shape ||
      (want.role == Role::Fp8Scale && want.shape == std::vector<int64_t>{1} && shape.empty());
  if (!shape_ok) {
    const TensorInfo got{want.name, dtype, shape, 0}, expected{want.name, dtype, want.shape, 0};
    return "tensor '" + want.name + "' has shape " + got.shape_string() + ", " + implied +
           " implies " + expected.shape_string();
  }
  const std::string named = "tensor '" + want.name + "' is " + std::string(dtype_name(dtype));
  switch (want.role) {
    case Role::Plain:
      if (dtype_is_scaled(dtype))
        return named +
               "; only the decoder projections of a model whose quantization_config says "
               "so may be fp8";
      return "";
    case Role::Fp8Weight:
      if (dtype != DType::F8_E4M3)
        return named + ", but quantization_config makes the decoder projections F8_E4M3";
      return "";
    case Role::Fp8Scale:
      if (dtype_is_scaled(dtype)) return named + "; a weight scale must be F32, F16 or BF16";
      return "";
  }
  return "";
}

std::vector<int> eos_token_ids(const ModelConfig& config, const std::string& generation_config,
                               const std::string& label) {
  if (!generation_config.empty()) {
    const json g = parse_json(generation_config, label);
    if (g.is_object()) {
      // Checked as config.json's are: an id the model cannot produce is an error, not ignored.
      token_id_list(g, "bos_token_id", config.vocab, label);
      std::vector<int> ids = token_id_list(g, "eos_token_id", config.vocab, label);
      if (!ids.empty()) return ids;
    }
  }
  return config.eos_ids;
}

namespace {

// `name` mapped read-only (nullptr when absent), refused as read_file refuses a text file over
// the cap: a worker maps the bytes it would otherwise copy.
std::shared_ptr<const MappedFile> map_text_file(const ModelDirectory& files, const char* name) {
  const UniqueFd fd = files.open_file(name);
  if (!fd.valid()) return nullptr;
  auto mapping =
      std::make_shared<const MappedFile>(MappedFile::map_file(fd.get(), files.path_of(name)));
  if (mapping->size() > kMaxTextFileBytes)
    throw std::runtime_error(files.path_of(name).string() + ": is " +
                             std::to_string(mapping->size()) + " bytes, more than the " +
                             std::to_string(kMaxTextFileBytes) + " allowed");
  return mapping;
}

}  // namespace

HfModel HfModel::open(const fs::path& dir, const HfOpenOptions& options) {
  if (const auto at = find_invalid_utf8(dir.native()))
    throw std::runtime_error("the model directory's path " + json_excerpt(dir.string(), 200) +
                             " is not valid UTF-8 (byte " + std::to_string(*at) +
                             "); it travels in JSON replies, which must be UTF-8");
  // Every file is read through the directory: regular files only, never blocking on a FIFO.
  const ModelDirectory files = ModelDirectory::open(dir);
  HfModel m;
  m.dir_ = dir;
  std::optional<std::string> config = files.read("config.json");
  if (!config)
    throw std::runtime_error(dir.string() +
                             ": no config.json (not a Hugging Face model directory)");
  m.config_json_ = std::move(*config);
  check_utf8(m.config_json_, files.path_of("config.json"));
  // config.json travels inside the manifest, inside a frame: it gets the embedded depth.
  const std::string config_path = files.path_of("config.json").string();
  m.config_ = parse_model_config(parse_json(m.config_json_, config_path, kMaxEmbeddedJsonDepth),
                                 config_path);
  // The others travel as text and are parsed by the worker: their depth is checked now, so
  // that no reader ever recurses through a hostile one.
  const auto check_text = [&](std::string_view text, const char* name) {
    check_utf8(text, files.path_of(name));
    check_json_depth(text, files.path_of(name).string());
  };
  const auto text_file = [&](const char* name) {
    std::string text = files.read(name).value_or("");
    check_text(text, name);
    return text;
  };
  m.tokenizer_file_ = map_text_file(files, "tokenizer.json");
  if (options.check_tokenizer_json) check_text(m.tokenizer_json(), "tokenizer.json");
  m.tokenizer_config_json_ = text_file("tokenizer_config.json");
  m.generation_config_json_ = text_file("generation_config.json");
  // Its token ids are checked against the vocabulary now, not first in a worker.
  eos_token_ids(m.config_, m.generation_config_json_,
                files.path_of("generation_config.json").string());

  std::vector<std::string> shard_names;
  if (const auto index = files.read("model.safetensors.index.json"))
    shard_names = shard_names_from_index(*index, files.path_of("model.safetensors.index.json"));
  else if (files.open_file("model.safetensors").valid())
    shard_names = {"model.safetensors"};
  else
    throw std::runtime_error(dir.string() +
                             ": no model.safetensors or model.safetensors.index.json");

  // Every tensor in every shard, by name; a name in two shards is an error.
  std::map<std::string, HfTensor> found;
  for (const std::string& name : shard_names) {
    const UniqueFd file = files.open_file(name);
    if (!file.valid())
      throw std::runtime_error(files.path_of(name).string() +
                               ": no such file (model.safetensors.index.json lists it)");
    // The layout is checked once the names are: a missing tensor is then named, not a gap.
    auto shard = std::make_shared<SafetensorsFile>(
        SafetensorsFile::open(file.get(), files.path_of(name), SafetensorsFile::Layout::kDeferred));
    for (const SafetensorsEntry& e : shard->header().tensors) {
      if (found.contains(e.info.name))
        throw std::runtime_error((dir / name).string() + ": tensor '" + e.info.name +
                                 "' also appears in " + found[e.info.name].shard);
      found[e.info.name] = HfTensor{e.info, shard->data(e), name};
    }
    m.shards_.push_back(std::move(shard));
  }

  for (const ExpectedTensor& want : expected_tensors(m.config_)) {
    auto it = found.find(want.name);
    if (it == found.end())
      throw std::runtime_error(dir.string() + ": missing tensor '" + want.name + "'");
    HfTensor& t = it->second;
    if (const std::string why = tensor_mismatch(want, t.info.dtype, t.info.shape, "the config");
        !why.empty())
      throw std::runtime_error((dir / t.shard).string() + ": " + why);
    m.by_name_[want.name] = m.tensors_.size();
    m.tensors_.push_back(std::move(t));
    found.erase(it);
  }
  for (const auto& [name, t] : found) {
    // Older checkpoints carry RoPE tables, and tied models sometimes a duplicate head; both are
    // derivable from what we already have, so they are ignored rather than refused.
    const bool rope_table = name.ends_with(".rotary_emb.inv_freq");
    const bool tied_head = m.config_.tie_embeddings && name == "lm_head.weight";
    if (!rope_table && !tied_head)
      throw std::runtime_error((dir / t.shard).string() + ": unexpected tensor '" + name +
                               "' for " + m.config_.architecture_name);
  }
  for (const auto& shard : m.shards_) shard->check_layout();
  return m;
}

std::string_view HfModel::tokenizer_json() const {
  if (!tokenizer_file_) return {};
  return {reinterpret_cast<const char*>(tokenizer_file_->data()), tokenizer_file_->size()};
}

const HfTensor* HfModel::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

uint64_t HfModel::total_bytes() const {
  uint64_t n = 0;
  for (const HfTensor& t : tensors_) n += t.info.bytes;
  return n;
}

}  // namespace hearth
