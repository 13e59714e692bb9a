// The server side of the `memfd` backend: every tensor copied into its own sealed memfd, which
// workers map read-only. Needs no GPU, so the whole multi-process design runs (and is tested)
// on machines without one. Bytes are stored exactly as in the safetensors files, so a worker's
// CPU engine computes on the same bytes as single-process mode.
#pragma once

#include <memory>
#include <vector>

#include "weight-server/sharing/exportable_store.h"
#include "weight-server/model/hf_model.h"
#include "base/mapped_file.h"
#include "weight-server/sharing/sealed_memfd.h"

namespace hearth {

struct MemfdLoadOptions {
  int threads = 4;        // tensors written in parallel
  bool progress = false;  // progress lines on stderr
  std::string label;      // names the model in progress lines
};

class MemfdStore final : public ExportableStore {
 public:
  static std::unique_ptr<MemfdStore> create(const HfModel& model, const MemfdLoadOptions& options);

  Residence residence() const override { return Residence::Host; }
  const char* backend_name() const override { return "memfd"; }
  size_t allocation_count() const override { return memfds_.size(); }
  UniqueFd export_allocation(uint32_t id) const override;

 private:
  MemfdStore() = default;
  std::vector<SealedMemfd> memfds_;
  // Read-only views, so the store's tensors have host addresses like any other; pages are only
  // touched if something in the server reads them.
  std::vector<MappedFile> views_;
};

}  // namespace hearth
