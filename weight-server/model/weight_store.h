// Where a model's tensors live once loaded: one allocation per tensor, on the host or the GPU.
// The engine only ever sees this interface, so single-process runs (host mapping, in-process
// VMM arena) and served workers (imported memfd or VMM allocations) run the same code.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "weight-server/model/model_config.h"
#include "weight-server/model/safetensors.h"

namespace hearth {

enum class Residence { Host, Device };

struct StoredTensor {
  TensorInfo info;
  const void* data = nullptr;  // host address, or device address when residence() is Device
  uint64_t alloc_bytes = 0;    // size of the allocation holding it (rounded to its granularity)
  uint32_t alloc_id = 0;       // index of that allocation within the store
};

class WeightStore {
 public:
  virtual ~WeightStore() = default;
  virtual Residence residence() const = 0;
  virtual const char* backend_name() const = 0;  // "host", "memfd", "vmm", ...

  const ModelConfig& config() const { return config_; }
  const std::vector<StoredTensor>& tensors() const { return tensors_; }
  const StoredTensor* find(const std::string& name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : &tensors_[it->second];
  }
  // Throws std::runtime_error naming the tensor when absent.
  const StoredTensor& at(const std::string& name) const;

 protected:
  void add_tensor(StoredTensor t) {
    by_name_[t.info.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  ModelConfig config_;

 private:
  std::vector<StoredTensor> tensors_;
  std::map<std::string, size_t> by_name_;
};

}  // namespace hearth
