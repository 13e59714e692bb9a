#include "worker/engine/kv_cache_manager.h"

#include <algorithm>
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
  if (n > pool_.free()) unpin_withdrawn();  // pinned blocks other workers may have let go
  if (n > pool_.free()) return false;
  std::vector<int32_t>& table = tables_[seq];
  const size_t first_new = table.size();
  if (!pool_.allocate(n, table)) return false;
  for (size_t i = first_new; i < table.size(); ++i)
    if (cache_.erase(table[i])) ++evicted_;
  if (published_.empty() || withdraw_new(table, first_new)) return true;
  if (table.empty()) tables_.erase(seq);
  return false;
}

bool KvCacheManager::withdraw_new(std::vector<int32_t>& table, size_t first_new) {
  for (;;) {
    std::vector<int32_t> asked;
    for (size_t i = first_new; i < table.size(); ++i)
      if (published_.contains(table[i])) asked.push_back(table[i]);
    if (asked.empty()) return true;
    std::vector<int32_t> writable;
    try {
      writable = shared_->withdraw(asked);
    } catch (const std::exception&) {
      // No answer: another worker may still map them, so none is written.
    }
    for (int32_t b : writable) published_.erase(b);
    // Those still published stay held (pinned), out of the table; others replace them.
    std::vector<int32_t> kept;
    for (size_t i = first_new; i < table.size(); ++i) {
      if (published_.contains(table[i]))
        pinned_.push_back(table[i]);
      else
        kept.push_back(table[i]);
    }
    const int lacking = int(table.size() - first_new - kept.size());
    table.resize(first_new);
    if (lacking > pool_.free()) {
      for (int32_t b : kept) pool_.release(b);
      return false;
    }
    table.insert(table.end(), kept.begin(), kept.end());
    const size_t first_replacement = table.size();
    pool_.allocate(lacking, table);
    for (size_t i = first_replacement; i < table.size(); ++i)
      if (cache_.erase(table[i])) ++evicted_;
  }
}

void KvCacheManager::unpin_withdrawn() {
  if (pinned_.empty()) return;
  std::vector<int32_t> writable;
  try {
    writable = shared_->withdraw(pinned_);
  } catch (const std::exception&) {
    return;
  }
  for (int32_t b : writable) {
    published_.erase(b);
    std::erase(pinned_, b);
    pool_.release(b);
  }
}

void KvCacheManager::release_foreign(std::span<const int32_t> blocks) {
  if (blocks.empty()) return;
  try {
    shared_->release(blocks);
  } catch (const std::exception&) {
    // The provider is gone: its references went with the connection.
  }
}

void KvCacheManager::share(SharedKv* shared) {
  if (!tables_.empty()) throw std::logic_error("KV sharing must start before any sequence");
  shared_ = prefix_cache_on_ ? shared : nullptr;
}

void KvCacheManager::publish_queued() {
  if (to_publish_.empty()) return;
  std::vector<SharedKvBlock> blocks;
  blocks.reserve(to_publish_.size());
  for (const QueuedBlock& q : to_publish_) {
    blocks.push_back({q.block, q.key, q.parent, q.tokens});
    // Whether or not the provider took it (a prefix another worker published first is not
    // taken; a failed call tells nothing), it is withdrawn before it is written again.
    published_.insert(q.block);
  }
  try {
    published_total_ += shared_->publish(blocks);
  } catch (const std::exception&) {
    // Other workers only miss these blocks.
  }
  to_publish_.clear();
}

void KvCacheManager::free(SequenceId seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  std::vector<int32_t> foreign_blocks;
  for (auto b = it->second.rbegin(); b != it->second.rend(); ++b) {
    if (foreign(*b))
      foreign_blocks.push_back(*b);
    else
      pool_.release(*b);
  }
  tables_.erase(it);
  release_foreign(foreign_blocks);
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

int KvCacheManager::reuse_cached_blocks(Sequence& seq, int* shared, bool ask_shared) {
  if (shared) *shared = 0;
  if (!prefix_cache_on_) return 0;
  const int before = seq.computed;
  const int last_token = int(seq.tokens.size()) - 1;
  // Block j of `seq` is now `block` (a partly computed block is swapped for it).
  auto take = [&](int j, int32_t block) {
    std::vector<int32_t>& table = tables_[seq.id];
    if (j < int(table.size())) {  // the partly computed block the cached one replaces
      pool_.release(table[j]);
      table[j] = block;
    } else {
      table.push_back(block);
    }
    seq.computed = (j + 1) * block_size_;
  };
  int j = seq.computed / block_size_;
  for (; (j + 1) * block_size_ <= last_token; ++j) {
    const BlockKey& key = block_key(seq, j);
    const BlockKey& parent = j == 0 ? seq.chain_root : seq.block_keys[j - 1];
    const int32_t block =
        cache_.find(key, parent, std::span(seq.tokens).subspan(j * block_size_, block_size_));
    if (block < 0) break;
    pool_.reuse(block);
    take(j, block);
  }
  if (!shared_ || !ask_shared || (j + 1) * block_size_ > last_token) return seq.computed - before;

  // A local miss: the rest of the full blocks, as other workers may have published them.
  std::vector<SharedKvLink> chain;
  for (int k = j; (k + 1) * block_size_ <= last_token; ++k)
    chain.push_back(
        {block_key(seq, k), std::span(seq.tokens).subspan(k * block_size_, block_size_)});
  std::vector<int32_t> found;
  ++lookups_;
  try {
    found = shared_->find(j == 0 ? seq.chain_root : seq.block_keys[j - 1], chain);
  } catch (const std::exception&) {
    // The provider is gone or failed: a miss; the sequence computes the blocks itself.
  }
  for (size_t i = 0; i < found.size(); ++i, ++j) {
    const int32_t block = found[i];
    const bool is_foreign = foreign(block);
    if (i >= chain.size() || (!is_foreign && (block < 0 || block >= pool_.total()))) {
      // Not a block this pool can take: the run ends here and what is left goes back.
      std::vector<int32_t> rest;
      for (size_t r = i; r < found.size(); ++r)
        if (foreign(found[r])) rest.push_back(found[r]);
      release_foreign(rest);
      break;
    }
    if (is_foreign) {
      if (shared) *shared += block_size_;
    } else {
      // One this worker published itself and its cache forgot: its own again.
      pool_.reuse(block);
      cache_.insert(chain[i].key, j == 0 ? seq.chain_root : seq.block_keys[j - 1], chain[i].tokens,
                    block);
    }
    take(j, block);
  }
  return seq.computed - before;
}

void KvCacheManager::cache_full_blocks(Sequence& seq, int from, int to) {
  if (!prefix_cache_on_) return;
  const std::span<const int32_t> table = block_table(seq.id);
  for (int j = from / block_size_; (j + 1) * block_size_ <= to; ++j) {
    const BlockKey& key = block_key(seq, j);
    const BlockKey& parent = j == 0 ? seq.chain_root : seq.block_keys[j - 1];
    if (foreign(table[j])) continue;  // another worker's, published by it
    const auto tokens = std::span(seq.tokens).subspan(j * block_size_, block_size_);
    if (cache_.insert(key, parent, tokens, table[j]) && shared_)
      to_publish_.push_back({table[j], key, parent, {tokens.begin(), tokens.end()}});
  }
}

bool KvCacheManager::shrink(int n) {
  if (n < 0 || n > pool_.total()) return false;
  if (std::ranges::any_of(pinned_, [n](int32_t b) { return b >= n; })) unpin_withdrawn();
  for (int32_t b = n; b < pool_.total(); ++b)
    if (pool_.ref_count(b) != 0) return false;
  for (int32_t b = n; b < pool_.total(); ++b)
    if (cache_.erase(b)) ++evicted_;
  // Published blocks go back with their chunks: the server keeps them for their readers, and
  // this pool never writes them again.
  std::erase_if(published_, [n](int32_t b) { return b >= n; });
  return pool_.shrink(n);
}

void KvCacheManager::drop_unused_cached_blocks() {
  unpin_withdrawn();
  for (int32_t b = 0; b < pool_.total(); ++b)
    if (pool_.ref_count(b) == 0) cache_.erase(b);
}

}  // namespace hearth
