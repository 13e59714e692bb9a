// The `host` backend: tensors used in place from the mapped safetensors files of an open model
// directory. No copy, no conversion; for single-process CPU runs and tests.
#pragma once

#include <memory>

#include "weight-server/model/hf_model.h"
#include "weight-server/model/weight_store.h"

namespace hearth {

class HostStore final : public WeightStore {
 public:
  explicit HostStore(std::shared_ptr<const HfModel> model);
  Residence residence() const override { return Residence::Host; }
  const char* backend_name() const override { return "host"; }

 private:
  std::shared_ptr<const HfModel> model_;  // keeps the mappings alive
};

}  // namespace hearth
