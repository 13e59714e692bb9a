// Served mode: the factory a backend's KV pools are leased through (kv_memory.h), one per
// worker or tensor-parallel rank process. On a vmm server (`on_gpu`) each chunk is mapped into
// a VMM reservation on the GPU of the pool's rank (`devices[rank]`, this process's numbering);
// otherwise into host memory (memfd). `share` adds room for other workers' prefix chunks.
#pragma once

#include <memory>
#include <vector>

#include "ipc/client.h"
#include "worker/engine/kv_memory.h"

namespace hearth {

// `server` is the connection the model was imported on, shared with its weights' lease.
KvMemoryFactory make_leased_kv_factory(std::shared_ptr<ipc::Client> server,
                                       std::vector<int> devices, bool on_gpu, bool share);

}  // namespace hearth
