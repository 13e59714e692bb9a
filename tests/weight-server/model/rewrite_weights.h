// Rewriting a model directory's weights for the model tests: the same tensors' names, dtypes
// and shapes, edited, in a fresh model.safetensors (its values made up).
#pragma once

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "tests/support/safetensors_builder.h"
#include "weight-server/model/hf_model.h"

namespace hearth::test {

// Rewrites model.safetensors with `mutate` applied to the list of (name, dtype, shape).
inline void rewrite_weights(const std::filesystem::path& dir,
                            const std::function<void(std::vector<TensorSpec>&)>& mutate) {
  HfModel m = HfModel::open(dir);
  std::vector<TensorSpec> specs;
  for (const HfTensor& t : m.tensors())
    specs.push_back({t.info.name, std::string(dtype_name(t.info.dtype)), t.info.shape});
  mutate(specs);
  auto image = valid_safetensors(specs);
  std::ofstream(dir / "model.safetensors", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(image.data()), image.size());
}

}  // namespace hearth::test
