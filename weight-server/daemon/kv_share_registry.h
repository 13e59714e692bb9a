// The server's index of KV blocks shared across workers (issue 22 item 3): which published block
// (chunk id, byte offset) holds the keys and values of which prefix, who references it, and
// which memory can go when the budget needs it. Pure bookkeeping, no memory and no sockets: the
// handler maps protocol ops onto it and frees the chunks it names.
//
// A block is named by the hash chain the engine's prefix cache already uses (prefix_cache.h): its
// key chains its parent's key with its token ids, and the chain's root covers the cache domain
// and the request's cache_salt. The registry also keeps each block's parent key, token ids,
// cache domain and block size and compares them on every hit, so a hash collision, a forged key
// or another domain can only ever cost a miss, never a wrong block.
//
// Rules the registry enforces:
// - Only a chunk's owner publishes blocks in it, at a block-aligned offset inside it, and a
//   place holds one block. The owner publishes only after the step that filled the block
//   succeeded (the worker's side of the contract: the registry cannot see steps).
// - Every hit a lookup returns holds one reference for the asking client until it unrefs it or
//   forgets (its connection closed). A worker never writes a block it did not allocate; the
//   owner writes its own published block again only after withdraw() succeeded, which it does
//   only while nobody else references the block.
// - A chunk whose owner gives it back (kv_return, or the owner's connection closed) stays alive
//   while it holds published blocks: it becomes the server's, and its blocks stay findable. Such
//   an orphan whose blocks nobody references is evictable; evict() names the least recently used
//   first (a hit or a publish counts as a use).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <vector>

namespace hearth {

struct KvShareKey {
  uint64_t low = 0, high = 0;
  auto operator<=>(const KvShareKey&) const = default;
};

struct KvBlockPlace {
  uint64_t chunk = 0;
  uint64_t offset = 0;  // bytes from the chunk's start, a multiple of the block size
  auto operator<=>(const KvBlockPlace&) const = default;
};

// What a published block holds; a lookup must match all of it.
struct KvShareBlock {
  KvShareKey domain;  // the engine's cache domain (model identity and numerics options)
  uint64_t block_bytes = 0;
  KvShareKey key, parent;
  std::vector<int32_t> tokens;
};

// One link of a chain a lookup walks: the block's key and its token ids. The first link's parent
// is the lookup's root; each later link's parent is the previous link's key.
struct KvShareLink {
  KvShareKey key;
  std::span<const int32_t> tokens;
};

class KvShareRegistry {
 public:
  using ClientId = uint64_t;

  // References one client may hold at once: a client that looks up without ever dropping what
  // it found cannot pin other workers' blocks without bound (a lookup past it finds less).
  static constexpr uint64_t kDefaultMaxReferences = uint64_t(1) << 20;
  explicit KvShareRegistry(uint64_t max_references_per_client = kDefaultMaxReferences)
      : max_references_(max_references_per_client) {}

  enum class Publish {
    kPublished,
    kDuplicate,   // the key is published already (the same prefix computed twice): ignored
    kNotOwner,    // the chunk is not registered to this client
    kBadPlace,    // offset not block-aligned or past the chunk's end, or block_bytes 0
    kPlaceTaken,  // another block is published at this place
  };
  enum class Withdraw { kWithdrawn, kReferenced, kNotFound };

  // `owner` leased chunk `chunk` of `bytes`. Throws std::invalid_argument if the id is known.
  void add_chunk(ClientId owner, uint64_t chunk, uint64_t bytes);
  // The owner gave `chunk` back (kv_return or its connection closed). True when the chunk can be
  // freed now (it holds no published block); false when it stays, orphaned, for its blocks.
  bool release_chunk(uint64_t chunk);

  Publish publish(ClientId owner, const KvBlockPlace& place, const KvShareBlock& block);
  // Walks `chain` from `root` under (domain, block_bytes) and returns the places of the longest
  // run of hits from its start, cut where `client` would pass its reference limit; each hit
  // gains one reference for `client`.
  std::vector<KvBlockPlace> lookup(ClientId client, const KvShareKey& domain, uint64_t block_bytes,
                                   const KvShareKey& root, std::span<const KvShareLink> chain);
  // Drops one reference of `client` per place. False, changing nothing, when `client` does not
  // hold that many references to each of them.
  bool unref(ClientId client, std::span<const KvBlockPlace> places);
  // The owner takes its block back to write it again: unpublishes it unless a client other than
  // the owner references it (the owner's own references go with it).
  Withdraw withdraw(ClientId owner, const KvBlockPlace& place);
  // `client`'s connection closed: its references go. Its chunks are released separately
  // (release_chunk) as the handler drops them; orphans this leaves unreferenced wait for evict().
  void forget(ClientId client);

  // Up to `bytes` (at least one chunk when any qualifies) of orphaned chunks that nobody
  // references, least recently used first; their blocks are unpublished and the chunks
  // forgotten, for the caller to free. With `eligible`, only chunks it accepts (the chunks of
  // one device: a tensor-parallel worker's ranks publish on each of theirs).
  std::vector<uint64_t> evict(uint64_t bytes,
                              const std::function<bool(uint64_t chunk)>& eligible = {});

  size_t blocks() const { return by_key_.size(); }
  size_t orphaned_chunks() const;
  // References `client` holds, over all blocks.
  uint64_t references_of(ClientId client) const;
  // References held on the block at `place`, by every client.
  uint64_t references_at(const KvBlockPlace& place) const;
  std::optional<ClientId> owner_of(uint64_t chunk) const;

 private:
  struct Entry {
    KvShareBlock block;
    KvBlockPlace place;
    std::map<ClientId, uint64_t> refs;  // client -> references it holds
    uint64_t last_use = 0;
  };
  struct Chunk {
    std::optional<ClientId> owner;  // empty once given back (orphaned)
    uint64_t bytes = 0;
    std::set<uint64_t> offsets;  // places of its published blocks
    uint64_t last_use = 0;       // the latest last_use of its blocks
  };
  Entry* entry_at(const KvBlockPlace& place);
  void unpublish(const KvBlockPlace& place);
  static bool referenced(const Entry& entry) { return !entry.refs.empty(); }
  uint64_t tick() { return ++clock_; }

  std::map<KvShareKey, KvBlockPlace> by_key_;
  std::map<KvBlockPlace, Entry> entries_;
  std::map<uint64_t, Chunk> chunks_;
  std::map<ClientId, std::map<KvBlockPlace, uint64_t>> refs_by_client_;
  uint64_t clock_ = 0;
  uint64_t max_references_;
};

}  // namespace hearth
