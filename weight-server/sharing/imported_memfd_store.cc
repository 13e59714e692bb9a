#include "weight-server/sharing/imported_memfd_store.h"

#include <stdexcept>
#include <string>

#include "weight-server/sharing/sealed_memfd.h"

namespace hearth {

ImportedMemfdStore::ImportedMemfdStore(const Manifest& manifest, std::vector<UniqueFd> fds) {
  if (fds.size() != manifest.tensors.size())
    throw std::runtime_error("model '" + manifest.model + "': received " +
                             std::to_string(fds.size()) + " descriptors for " +
                             std::to_string(manifest.tensors.size()) + " tensors");
  config_ = manifest.config;
  mappings_.reserve(fds.size());
  for (size_t i = 0; i < fds.size(); ++i) {
    const ManifestTensor& t = manifest.tensors[i];
    const std::string label = "model '" + manifest.model + "', tensor '" + t.info.name + "'";
    check_sealed_memfd(fds[i].get(), t.allocation_bytes, label);
    mappings_.push_back(MappedFile::map_fd(fds[i].get(), t.allocation_bytes, label));
    fds[i].reset();  // the mapping holds the memory; the descriptor is no longer needed
    add_tensor(StoredTensor{t.info, mappings_.back().data(), t.allocation_bytes, uint32_t(i)});
  }
}

}  // namespace hearth
