// A Hugging Face model directory opened for reading: its config, generation settings,
// tokenizer files and safetensors shards, with every tensor checked against what the
// architecture expects (names, shapes, dtypes) before anything is uploaded or run.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/mapped_file.h"
#include "weight-server/model/model_config.h"
#include "weight-server/model/safetensors.h"

namespace hearth {

// Where one tensor's bytes live inside an open model directory.
struct HfTensor {
  TensorInfo info;
  std::span<const std::byte> data;  // inside a mapped shard; valid while the HfModel lives
  std::string shard;                // file name, for error messages
};

struct HfOpenOptions {
  // Checks tokenizer.json's UTF-8 and nesting now, as the server must before it shares the file.
  // A worker skips this pass over what may be 100 MB: it opens the tokenizer from an image
  // built from these exact bytes, or parses them, and the parser refuses the same things.
  bool check_tokenizer_json = true;
};

class HfModel {
 public:
  // Opens and validates `dir`. Throws std::runtime_error naming the file and tensor at fault.
  static HfModel open(const std::filesystem::path& dir, const HfOpenOptions& options = {});

  const std::filesystem::path& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  const std::vector<HfTensor>& tensors() const { return tensors_; }  // in load order
  const HfTensor* find(const std::string& name) const;

  // Raw file contents ("" when absent), passed along as-is to workers.
  const std::string& config_json() const { return config_json_; }
  // Mapped, not copied (it can be 100 MB); valid while the HfModel lives.
  std::string_view tokenizer_json() const;
  const std::string& tokenizer_config_json() const { return tokenizer_config_json_; }
  const std::string& generation_config_json() const { return generation_config_json_; }

  uint64_t total_bytes() const;

 private:
  friend HfModel quantize_fp8_at_load(const HfModel& source, int threads);
  std::filesystem::path dir_;
  ModelConfig config_;
  std::string config_json_, tokenizer_config_json_, generation_config_json_;
  std::shared_ptr<const MappedFile> tokenizer_file_;  // null when absent
  std::vector<std::shared_ptr<SafetensorsFile>> shards_;
  std::vector<HfTensor> tensors_;
  std::map<std::string, size_t> by_name_;
  std::shared_ptr<const std::vector<std::byte>> owned_;  // tensors made at load (quantized)
};

// The tensors a model of this configuration must have, with their shapes, in a stable order
// (embedding, then per layer, then final norm and head). A quantized model's projections are
// F8_E4M3, each followed by its scale "<name>_scale" (shape [out, 1] per channel, [1] per
// tensor, where [] is accepted too).
struct ExpectedTensor {
  enum class Role { Plain, Fp8Weight, Fp8Scale };
  std::string name;
  std::vector<int64_t> shape;
  Role role = Role::Plain;
};
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config);

// Why a tensor of this dtype and shape cannot be `want` ("" when it can): the shape, or a dtype
// its role does not allow (fp8 codes outside the quantized projections, a 16-bit projection in
// a quantized model, a scale that is not F32, F16 or BF16). `implied` names what implies the
// expectation in the message ("the config", "the architecture").
std::string tensor_mismatch(const ExpectedTensor& want, DType dtype,
                            const std::vector<int64_t>& shape, const char* implied);

// End-of-sequence ids from generation_config.json, falling back to config.json's. Throws
// (naming `label`) for a file that is not JSON or holds a bos or eos id outside the vocabulary.
std::vector<int> eos_token_ids(const ModelConfig& config, const std::string& generation_config_json,
                               const std::string& label = "generation_config.json");

}  // namespace hearth
