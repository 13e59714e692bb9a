#include "weight-server/model/host_store.h"

namespace hearth {

HostStore::HostStore(std::shared_ptr<const HfModel> model) : model_(std::move(model)) {
  config_ = model_->config();
  uint32_t id = 0;
  for (const HfTensor& t : model_->tensors())
    add_tensor(StoredTensor{t.info, t.data.data(), t.info.bytes, id++});
}

}  // namespace hearth
