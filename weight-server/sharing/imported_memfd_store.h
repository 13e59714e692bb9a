// The worker side of the `memfd` backend: the tensors of a served model, mapped read-only from
// the sealed memfds a server sent. Each descriptor is checked (a sealed memfd of the size the
// manifest gives) before it is mapped and closed right after; the mappings keep the memory
// alive, so the worker runs on even if the server exits.
#pragma once

#include <vector>

#include "base/unique_fd.h"
#include "weight-server/sharing/manifest.h"
#include "base/mapped_file.h"
#include "weight-server/model/weight_store.h"

namespace hearth {

class ImportedMemfdStore final : public WeightStore {
 public:
  // `fds[i]` is the allocation of manifest.tensors[i]. Throws std::runtime_error naming the
  // tensor when a descriptor is not what the manifest promises; every descriptor is closed
  // either way.
  ImportedMemfdStore(const Manifest& manifest, std::vector<UniqueFd> fds);

  Residence residence() const override { return Residence::Host; }
  const char* backend_name() const override { return "memfd"; }

 private:
  std::vector<MappedFile> mappings_;
};

}  // namespace hearth
