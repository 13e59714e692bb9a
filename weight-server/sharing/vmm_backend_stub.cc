// The vmm seam in a build without CUDA: every GPU path says so.
#include <stdexcept>

#include "weight-server/sharing/vmm_backend.h"

namespace hearth {

namespace {
[[noreturn]] void no_cuda() {
  throw std::runtime_error(
      "this hearth was built without CUDA (no nvcc at build time), so the vmm "
      "backend is unavailable; use the memfd backend");
}
}  // namespace

bool vmm_gpu_available(std::string* why) {
  if (why) *why = "this hearth was built without CUDA";
  return false;
}

std::unique_ptr<ExportableStore> upload_vmm_store(const HfModel&, const VmmLoadOptions&) {
  no_cuda();
}
int vmm_device_count() {
  return 0;
}
std::unique_ptr<ExportableStore> upload_sharded_vmm_store(const HfModel&, const ShardPlan&,
                                                          const std::vector<int>&,
                                                          const VmmLoadOptions&,
                                                          std::vector<uint64_t>&) {
  no_cuda();
}
int vmm_device_for(const std::string&) {
  no_cuda();
}
std::shared_ptr<const WeightStore> import_vmm_store(const Manifest&, std::vector<UniqueFd>, int) {
  no_cuda();
}
uint64_t device_checksum(const void*, uint64_t) {
  no_cuda();
}
uint64_t vmm_device_memory_bytes(int) {
  no_cuda();
}
std::unique_ptr<KvChunkMemory> create_vmm_kv_chunk(int, uint64_t) {
  no_cuda();
}
std::unique_ptr<KvChunkRange> reserve_vmm_kv_range(int, uint64_t) {
  no_cuda();
}

}  // namespace hearth
