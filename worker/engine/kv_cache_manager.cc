#include "worker/engine/kv_cache_manager.h"

#include <stdexcept>
#include <string>

#include "worker/engine/sequence.h"

namespace hearth {

KvCacheManager::KvCacheManager(int num_blocks, int block_size, bool prefix_cache, bool growable)
    : pool_(num_blocks, growable), block_size_(block_size), prefix_cache_on_(prefix_cache) {
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
  std::vector<int32_t>& table = tables_[seq];
  const size_t first_new = table.size();
  if (!pool_.allocate(n, table)) return false;
  for (size_t i = first_new; i < table.size(); ++i)
    if (cache_.erase(table[i])) ++evicted_;
  return true;
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

const BlockKey& KvCacheManager::block_key(Sequence& seq, int block) {
  while (int(seq.block_keys.size()) <= block) {
    const size_t j = seq.block_keys.size();
    const BlockKey& parent = j == 0 ? seq.chain_root : seq.block_keys.back();
    const auto tokens = std::span(seq.tokens).subspan(j * block_size_, block_size_);
    seq.block_keys.push_back(chain_block_key(parent, tokens));
  }
  return seq.block_keys[block];
}

int KvCacheManager::next_lookup_block(const Sequence& seq) const {
  const int j = seq.computed / block_size_;
  const int last_token = int(seq.tokens.size()) - 1;
  return prefix_cache_on_ && (j + 1) * block_size_ <= last_token ? j : -1;
}

int KvCacheManager::reuse_cached_blocks(Sequence& seq) {
  if (!prefix_cache_on_) return 0;
  const int before = seq.computed;
  const int last_token = int(seq.tokens.size()) - 1;
  for (int j = seq.computed / block_size_; (j + 1) * block_size_ <= last_token; ++j) {
    const BlockKey& key = block_key(seq, j);
    const BlockKey& parent = j == 0 ? seq.chain_root : seq.block_keys[j - 1];
    const int32_t block =
        cache_.find(key, parent, std::span(seq.tokens).subspan(j * block_size_, block_size_));
    if (block < 0) break;
    pool_.reuse(block);
    std::vector<int32_t>& table = tables_[seq.id];
    if (j < int(table.size())) {  // the partly computed block the cached one replaces
      pool_.release(table[j]);
      table[j] = block;
    } else {
      table.push_back(block);
    }
    seq.computed = (j + 1) * block_size_;
  }
  return seq.computed - before;
}

void KvCacheManager::cache_full_blocks(Sequence& seq, int from, int to) {
  if (!prefix_cache_on_) return;
  const std::span<const int32_t> table = block_table(seq.id);
  for (int j = from / block_size_; (j + 1) * block_size_ <= to; ++j) {
    const BlockKey& key = block_key(seq, j);
    const BlockKey& parent = j == 0 ? seq.chain_root : seq.block_keys[j - 1];
    cache_.insert(key, parent, std::span(seq.tokens).subspan(j * block_size_, block_size_),
                  table[j]);
  }
}

bool KvCacheManager::shrink(int n) {
  if (n < 0 || n > pool_.total()) return false;
  for (int32_t b = n; b < pool_.total(); ++b)
    if (pool_.ref_count(b) != 0) return false;
  for (int32_t b = n; b < pool_.total(); ++b)
    if (cache_.erase(b)) ++evicted_;
  return pool_.shrink(n);
}

void KvCacheManager::drop_unused_cached_blocks() {
  for (int32_t b = 0; b < pool_.total(); ++b)
    if (pool_.ref_count(b) == 0) cache_.erase(b);
}

}  // namespace hearth
