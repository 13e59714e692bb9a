#include "worker/leased_kv_factory.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "weight-server/sharing/kv_chunk.h"
#include "weight-server/sharing/vmm_backend.h"
#include "worker/leased_kv_memory.h"

namespace hearth {

KvMemoryFactory make_leased_kv_factory(std::shared_ptr<ipc::Client> server,
                                       std::vector<int> devices, bool on_gpu, bool share) {
  return [server = std::move(server), devices = std::move(devices), on_gpu, share](
             int64_t block_bytes, int max_blocks, int min_blocks,
             int rank) -> std::shared_ptr<KvMemory> {
    LeasedKvMemory::Reserve reserve;
    if (on_gpu) {
      if (rank < 0 || size_t(rank) >= devices.size())
        throw std::runtime_error("the served model has no GPU for tensor parallel rank " +
                                 std::to_string(rank));
      reserve = [device = devices[size_t(rank)]](uint64_t bytes) {
        return reserve_vmm_kv_range(device, bytes);
      };
    }
    // Sharing prefix KV with other workers: room for as many of their chunks as the pool's own
    // (address space only), mapped read-only.
    LeasedKvSharing sharing;
    if (share) {
      const int per_chunk = int(kv_chunk_bytes_for(uint64_t(block_bytes)) / block_bytes);
      sharing.chunks = (std::max(max_blocks, min_blocks) + per_chunk - 1) / per_chunk;
    }
    return std::make_shared<LeasedKvMemory>(server, block_bytes, max_blocks, min_blocks, reserve,
                                            sharing, rank);
  };
}

}  // namespace hearth
