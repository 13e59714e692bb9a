#include "weight-server/model/quantize_at_load.h"

#include <cstring>
#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "weight-server/model/fp8_quantize.h"
#include "weight-server/model/parallel_for.h"

namespace hearth {

using json = nlohmann::json;

HfModel quantize_fp8_at_load(const HfModel& source, int threads) {
  if (source.config().quantization.fp8())
    throw std::runtime_error(source.dir().string() + ": --quantize fp8: the model is already fp8");
  HfModel m = source;  // shares the shards: unquantized tensors stay in their mappings
  m.config_.quantization = kFp8PerChannel;
  json config = json::parse(source.config_json());
  config["quantization_config"] = quantization_config_json(kFp8PerChannel);
  m.config_json_ = config.dump(2);

  // Codes and scales in one buffer, each tensor 8-byte aligned as in a safetensors file.
  const std::vector<ExpectedTensor> expected = expected_tensors(m.config_);
  std::vector<uint64_t> offsets(expected.size());
  uint64_t total = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i].role == ExpectedTensor::Role::Plain) continue;
    offsets[i] = total;
    uint64_t bytes = expected[i].role == ExpectedTensor::Role::Fp8Weight ? 1 : 4;
    for (int64_t d : expected[i].shape) bytes *= uint64_t(d);
    total += (bytes + 7) / 8 * 8;
  }
  auto buffer = std::make_shared<std::vector<std::byte>>(total);
  std::vector<HfTensor> tensors(expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const ExpectedTensor& want = expected[i];
    if (want.role == ExpectedTensor::Role::Plain) {
      tensors[i] = *source.find(want.name);
      continue;
    }
    const DType dtype = want.role == ExpectedTensor::Role::Fp8Weight ? DType::F8_E4M3 : DType::F32;
    TensorInfo info{want.name, dtype, want.shape, 0};
    info.bytes = info.numel() * dtype_size(dtype);
    tensors[i] = HfTensor{info, {buffer->data() + offsets[i], info.bytes}, "(quantized at load)"};
  }
  // One job per projection: its rows quantized into its codes and the scale tensor after it.
  std::vector<size_t> jobs;
  for (size_t i = 0; i < expected.size(); ++i)
    if (expected[i].role == ExpectedTensor::Role::Fp8Weight) jobs.push_back(i);
  parallel_for(jobs.size(), threads, [&](size_t j) {
    const size_t i = jobs[j];
    const HfTensor& from = *source.find(expected[i].name);
    const int64_t rows = from.info.shape[0], cols = from.info.shape[1];
    const size_t width = dtype_size(from.info.dtype);
    auto* codes = reinterpret_cast<uint8_t*>(buffer->data() + offsets[i]);
    std::byte* scales = buffer->data() + offsets[i + 1];
    for (int64_t r = 0; r < rows; ++r) {
      const float scale = quantize_row_fp8(from.data.data() + r * cols * width, from.info.dtype,
                                           cols, codes + r * cols);
      std::memcpy(scales + 4 * r, &scale, 4);
    }
  });
  m.tensors_ = std::move(tensors);
  m.by_name_.clear();
  for (size_t i = 0; i < m.tensors_.size(); ++i) m.by_name_[m.tensors_[i].info.name] = i;
  m.owned_ = std::move(buffer);
  return m;
}

}  // namespace hearth
