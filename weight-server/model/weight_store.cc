#include "weight-server/model/weight_store.h"

#include <stdexcept>

namespace hearth {

const StoredTensor& WeightStore::at(const std::string& name) const {
  const StoredTensor* t = find(name);
  if (!t) throw std::runtime_error("weight store has no tensor '" + name + "'");
  return *t;
}

}  // namespace hearth
