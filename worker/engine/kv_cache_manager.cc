#include "worker/engine/kv_cache_manager.h"

#include <stdexcept>
#include <string>

namespace hearth {

KvCacheManager::KvCacheManager(int num_blocks, int block_size)
    : pool_(num_blocks), block_size_(block_size) {
  if (block_size <= 0)
    throw std::runtime_error("the KV block size must be positive, got " +
                             std::to_string(block_size));
}

int KvCacheManager::blocks_needed(SequenceId seq, int tokens) const {
  auto it = tables_.find(seq);
  const int held = it == tables_.end() ? 0 : int(it->second.size());
  const int want = blocks_for(tokens);
  return want > held ? want - held : 0;
}

bool KvCacheManager::allocate(SequenceId seq, int tokens) {
  const int n = blocks_needed(seq, tokens);
  if (n == 0) return true;
  if (n > pool_.free()) return false;
  return pool_.allocate(n, tables_[seq]);
}

void KvCacheManager::free(SequenceId seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  for (auto b = it->second.rbegin(); b != it->second.rend(); ++b) pool_.release(*b);
  tables_.erase(it);
}

std::span<const int32_t> KvCacheManager::block_table(SequenceId seq) const {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return {};
  return it->second;
}

}  // namespace hearth
