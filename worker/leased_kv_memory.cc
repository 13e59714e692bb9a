#include "worker/leased_kv_memory.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "ipc/fd_passing.h"
#include "ipc/protocol.h"
#include "weight-server/sharing/kv_chunk.h"

namespace hearth {
namespace {

// HEARTH_KV_TRACE=1: one stderr line per lease, lookup, release and publish with its time, to
// find where a served request's time to first token goes (the server round trips and chunk
// mappings here are outside the engine's step).
bool tracing() {
  static const bool on = [] {
    const char* v = std::getenv("HEARTH_KV_TRACE");
    return v && *v && std::string(v) != "0";
  }();
  return on;
}

class Trace {
 public:
  Trace()
      : start_(tracing() ? std::chrono::steady_clock::now()
                         : std::chrono::steady_clock::time_point{}) {}
  template <typename... Args>
  void line(const char* format, Args... args) const {
    if (!tracing()) return;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
            .count();
    std::fprintf(stderr, "hearth-worker: kv trace %.3f ms: ", ms);
    std::fprintf(stderr, format, args...);
    std::fputc('\n', stderr);
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

LeasedKvMemory::LeasedKvMemory(std::shared_ptr<ipc::Client> server, int64_t block_bytes,
                               int max_blocks, int min_blocks, const Reserve& reserve,
                               LeasedKvSharing sharing, int device)
    : server_(std::move(server)), block_bytes_(block_bytes), device_(device) {
  if (sharing.chunks < 0) throw std::invalid_argument("a negative count of shared KV chunks");
  if (device < 0) throw std::invalid_argument("a negative KV device");
  if (!server_ || block_bytes <= 0 || max_blocks <= 0 || min_blocks < 0)
    throw std::invalid_argument("a leased KV pool needs a server, blocks and a size");
  chunk_bytes_ = kv_chunk_bytes_for(uint64_t(block_bytes));
  blocks_per_chunk_ = int(chunk_bytes_ / uint64_t(block_bytes));
  max_chunks_ = (std::max(max_blocks, min_blocks) + blocks_per_chunk_ - 1) / blocks_per_chunk_;
  min_chunks_ = (min_blocks + blocks_per_chunk_ - 1) / blocks_per_chunk_;
  sharing_chunks_ = sharing.chunks;
  const uint64_t bytes = uint64_t(max_chunks_ + sharing_chunks_) * chunk_bytes_;
  range_ = reserve ? reserve(bytes) : reserve_memfd_kv_range(bytes);
  if (sharing_chunks_ > 0)
    shared_ = std::make_unique<SharedKvBlocks>(
        server_, ipc::WireKey{sharing.domain.low, sharing.domain.high}, block_bytes_,
        sharing_chunks_, *range_, uint64_t(max_chunks_) * chunk_bytes_);
  if (min_chunks_ > 0) lease(min_chunks_);
}

LeasedKvMemory::~LeasedKvMemory() {
  // Unmapped first, so nothing here reaches a chunk once returned. The chunks go back with the
  // connection; a worker that lives on without its pool (tests) returns them now. A server
  // already gone has nothing to take back.
  shared_.reset();  // its mappings live in range_; its references go back first
  range_.reset();
  if (!chunk_ids_.empty() && server_->connected()) {
    try {
      server_->call(ipc::op::kKvReturn, ipc::make_kv_return_args(chunk_ids_));
    } catch (const std::exception&) {
    }
  }
}

int LeasedKvMemory::lease(int chunks) {
  chunks = std::min({chunks, max_chunks_ - int(chunk_ids_.size()), int(ipc::kMaxFdsPerFrame)});
  if (chunks <= 0) return 0;
  ipc::KvLeaseRequest request{chunk_bytes_, uint64_t(chunks), uint64_t(min_chunks_),
                              uint64_t(device_)};
  const Trace call_trace;
  ipc::Frame reply = server_->call(ipc::op::kKvLease, ipc::make_kv_lease_args(request));
  call_trace.line("kv_lease call for %d chunks", chunks);
  const nlohmann::json& ids = reply.body.at("chunks");
  // A server from before per-device leases ignores the device and answers with none: its chunks
  // would be device 0's, not this rank's.
  if (const auto it = reply.body.find("device");
      device_ != 0 && (it == reply.body.end() || *it != device_))
    throw std::runtime_error("the server leased KV chunks for another device than " +
                             std::to_string(device_) +
                             " (a server without KV leases per device cannot serve tensor "
                             "parallel ranks their KV)");
  if (!ids.is_array() || ids.size() != reply.fds.size() || ids.size() > size_t(chunks) ||
      reply.body.value("chunk_bytes", uint64_t(0)) != chunk_bytes_)
    throw std::runtime_error("the server's KV lease reply does not match what was asked (" +
                             std::to_string(reply.fds.size()) + " descriptors for " +
                             std::to_string(ids.size()) + " ids)");
  int mapped = 0;
  const Trace trace;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!ipc::is_unsigned_integer(ids[i]))
      throw std::runtime_error("the server's KV lease names a chunk that is not an id");
    range_->map(chunk_ids_.size() * chunk_bytes_, reply.fds[i].get(), chunk_bytes_,
                "KV chunk " + ids[i].dump());
    chunk_index_[ids[i].get<uint64_t>()] = chunk_ids_.size();
    chunk_ids_.push_back(ids[i].get<uint64_t>());
    ++mapped;
  }
  trace.line("lease asked %d chunks, got %d (mapping them)", chunks, mapped);
  return mapped;
}

int LeasedKvMemory::grow(int blocks) {
  if (blocks <= 0) return 0;
  return lease((blocks + blocks_per_chunk_ - 1) / blocks_per_chunk_) * blocks_per_chunk_;
}

int LeasedKvMemory::shrink(int keep) {
  const size_t keep_chunks = size_t(std::max(keep, 0) + blocks_per_chunk_ - 1) / blocks_per_chunk_;
  if (keep_chunks >= chunk_ids_.size()) return blocks();
  const Trace trace;
  // Unmapped first, so nothing here can reach the chunks once returned.
  for (size_t i = keep_chunks; i < chunk_ids_.size(); ++i)
    range_->unmap(i * chunk_bytes_, chunk_bytes_);
  const std::vector<uint64_t> returned(chunk_ids_.begin() + keep_chunks, chunk_ids_.end());
  for (uint64_t id : returned) chunk_index_.erase(id);
  chunk_ids_.resize(keep_chunks);
  server_->call(ipc::op::kKvReturn, ipc::make_kv_return_args(returned));
  trace.line("returned %zu chunks, keeping %zu", returned.size(), keep_chunks);
  return blocks();
}

ipc::WirePlace LeasedKvMemory::place_of_block(int block) const {
  if (block < 0 || block >= blocks())
    throw std::out_of_range("block " + std::to_string(block) + " is not in the leased pool");
  const uint64_t at = uint64_t(block) * uint64_t(block_bytes_);
  return {chunk_ids_[at / chunk_bytes_], at % chunk_bytes_};
}

std::vector<int32_t> LeasedKvMemory::find(const BlockKey& root,
                                          std::span<const SharedKvLink> chain) {
  return find_placed(root, chain, {});
}

std::vector<int32_t> LeasedKvMemory::find_at(const BlockKey& root,
                                             std::span<const SharedKvLink> chain,
                                             std::span<const int32_t> ids) {
  if (ids.size() != chain.size())
    throw std::invalid_argument("find_at needs one block id per link of the chain");
  return find_placed(root, chain, ids);
}

std::vector<int32_t> LeasedKvMemory::find_placed(const BlockKey& root,
                                                 std::span<const SharedKvLink> chain,
                                                 std::span<const int32_t> ids) {
  if (!shared_ || chain.empty()) return {};
  std::vector<ipc::KvLookupLink> links;
  links.reserve(chain.size());
  for (const SharedKvLink& link : chain)
    links.push_back({{link.key.low, link.key.high},
                     std::vector<int32_t>(link.tokens.begin(), link.tokens.end())});
  // Placed: a new chunk goes to the slot that gives its first block in the run the id asked
  // for, if the block sits at that offset of its chunk; an own id is only ever an own block.
  SharedKvBlocks::SlotChoice choose;
  if (!ids.empty())
    choose = [&](const ipc::WirePlace& first, size_t i) {
      if (ids[i] < first_foreign_block()) return SharedKvBlocks::kNoSlot;
      const uint64_t at = uint64_t(ids[i] - first_foreign_block()) * uint64_t(block_bytes_);
      if (at % chunk_bytes_ != first.offset) return SharedKvBlocks::kNoSlot;
      return int(at / chunk_bytes_);
    };
  std::vector<int32_t> found_ids;
  std::vector<ipc::WirePlace> unheld;  // own blocks found, and every block past a cut
  const Trace trace;
  const uint64_t maps_before = shared_->chunk_maps();
  const std::vector<SharedKvBlocks::Found> hits = shared_->lookup(
      {root.low, root.high}, links, [&](uint64_t chunk) { return chunk_index_.contains(chunk); },
      choose);
  trace.line("lookup of %zu blocks found %zu, mapped %llu new chunks", links.size(), hits.size(),
             static_cast<unsigned long long>(shared_->chunk_maps() - maps_before));
  for (size_t i = 0; i < hits.size(); ++i) {
    const SharedKvBlocks::Found& found = hits[i];
    // A block this worker published and its own cache forgot: the engine takes it as its own
    // block (which it withdraws before writing), never through a read-only alias it could
    // still be reading after a withdraw that ignores the owner's own references.
    const int32_t own = own_block_at(found.place);
    const int32_t id = own >= 0     ? own
                       : found.data ? int32_t((found.data - base()) / block_bytes_)
                                    : -1;
    if (id < 0 || (!ids.empty() && id != ids[i])) {
      for (size_t j = i; j < hits.size(); ++j) unheld.push_back(hits[j].place);
      break;
    }
    found_ids.push_back(id);
    if (own >= 0)
      unheld.push_back(found.place);
    else
      foreign_[id] = found.place;
  }
  if (!unheld.empty()) shared_->unref(unheld);
  return found_ids;
}

void LeasedKvMemory::set_domain(const BlockKey& domain) {
  if (shared_) shared_->set_domain({domain.low, domain.high});
}

int32_t LeasedKvMemory::own_block_at(const ipc::WirePlace& place) const {
  const auto it = chunk_index_.find(place.chunk);
  if (it == chunk_index_.end()) return -1;
  return int32_t((it->second * chunk_bytes_ + place.offset) / uint64_t(block_bytes_));
}

void LeasedKvMemory::release(std::span<const int32_t> foreign) {
  if (!shared_ || foreign.empty()) return;
  std::vector<ipc::WirePlace> places;
  for (int32_t id : foreign) {
    const auto it = foreign_.find(id);
    if (it == foreign_.end())
      throw std::invalid_argument("block " + std::to_string(id) + " is not a foreign block found");
    places.push_back(it->second);
  }
  const Trace trace;
  shared_->unref(places);
  trace.line("released %zu foreign blocks", places.size());
}

uint64_t LeasedKvMemory::publish(std::span<const SharedKvBlock> blocks) {
  if (!shared_ || blocks.empty()) return 0;
  std::vector<ipc::KvPublishBlock> wire;
  wire.reserve(blocks.size());
  for (const SharedKvBlock& b : blocks)
    wire.push_back({place_of_block(b.block),
                    {b.key.low, b.key.high},
                    {b.parent.low, b.parent.high},
                    std::vector<int32_t>(b.tokens.begin(), b.tokens.end())});
  const Trace trace;
  const uint64_t published = shared_->publish(wire);
  trace.line("published %llu of %zu blocks", static_cast<unsigned long long>(published),
             wire.size());
  return published;
}

std::vector<int32_t> LeasedKvMemory::withdraw(std::span<const int32_t> own) {
  if (!shared_) return {own.begin(), own.end()};
  std::vector<ipc::WirePlace> places;
  for (int32_t block : own) places.push_back(place_of_block(block));
  std::vector<int32_t> free_to_write;
  for (size_t i : shared_->withdraw(places)) free_to_write.push_back(own[i]);
  return free_to_write;
}

void LeasedKvMemory::wait_for_memory() {
  // Another worker frees memory on its own schedule; the server has no way to call back.
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

}  // namespace hearth
