#include "worker/leased_kv_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "ipc/fd_passing.h"
#include "ipc/protocol.h"
#include "weight-server/sharing/kv_chunk.h"

namespace hearth {

namespace {

[[noreturn]] void fail(const std::string& what, int err) {
  throw std::runtime_error(what + ": " + std::strerror(err));
}

}  // namespace

LeasedKvMemory::LeasedKvMemory(std::shared_ptr<ipc::Client> server, int64_t block_bytes,
                               int max_blocks, int min_blocks)
    : server_(std::move(server)), block_bytes_(block_bytes) {
  if (!server_ || block_bytes <= 0 || max_blocks <= 0 || min_blocks < 0)
    throw std::invalid_argument("a leased KV pool needs a server, blocks and a size");
  chunk_bytes_ = kv_chunk_bytes_for(uint64_t(block_bytes));
  blocks_per_chunk_ = int(chunk_bytes_ / uint64_t(block_bytes));
  max_chunks_ = (std::max(max_blocks, min_blocks) + blocks_per_chunk_ - 1) / blocks_per_chunk_;
  min_chunks_ = (min_blocks + blocks_per_chunk_ - 1) / blocks_per_chunk_;
  reserved_ = size_t(max_chunks_) * chunk_bytes_;
  // Address space only: nothing is backed until a chunk is mapped over it.
  void* p =
      ::mmap(nullptr, reserved_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    fail("cannot reserve " + std::to_string(reserved_ >> 20) + " MiB of address space for KV",
         errno);
  base_ = static_cast<std::byte*>(p);
  try {
    if (min_chunks_ > 0) lease(min_chunks_);
  } catch (...) {
    ::munmap(base_, reserved_);
    throw;
  }
}

LeasedKvMemory::~LeasedKvMemory() {
  ::munmap(base_, reserved_);
  // The chunks go back with the connection; a worker that lives on without its pool (tests)
  // returns them now. A server already gone has nothing to take back.
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
  ipc::KvLeaseRequest request{chunk_bytes_, uint64_t(chunks), uint64_t(min_chunks_)};
  ipc::Frame reply = server_->call(ipc::op::kKvLease, ipc::make_kv_lease_args(request));
  const nlohmann::json& ids = reply.body.at("chunks");
  if (!ids.is_array() || ids.size() != reply.fds.size() || ids.size() > size_t(chunks) ||
      reply.body.value("chunk_bytes", uint64_t(0)) != chunk_bytes_)
    throw std::runtime_error("the server's KV lease reply does not match what was asked (" +
                             std::to_string(reply.fds.size()) + " descriptors for " +
                             std::to_string(ids.size()) + " ids)");
  int mapped = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!ipc::is_unsigned_integer(ids[i]))
      throw std::runtime_error("the server's KV lease names a chunk that is not an id");
    const int fd = reply.fds[i].get();
    check_kv_chunk_memfd(fd, chunk_bytes_, "KV chunk " + ids[i].dump());
    std::byte* at = base_ + chunk_ids_.size() * chunk_bytes_;
    if (::mmap(at, chunk_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) ==
        MAP_FAILED)
      fail("cannot map KV chunk " + ids[i].dump(), errno);
    chunk_ids_.push_back(ids[i].get<uint64_t>());
    ++mapped;
  }
  return mapped;
}

int LeasedKvMemory::grow(int blocks) {
  if (blocks <= 0) return 0;
  return lease((blocks + blocks_per_chunk_ - 1) / blocks_per_chunk_) * blocks_per_chunk_;
}

int LeasedKvMemory::shrink(int keep) {
  const size_t keep_chunks = size_t(std::max(keep, 0) + blocks_per_chunk_ - 1) / blocks_per_chunk_;
  if (keep_chunks >= chunk_ids_.size()) return blocks();
  // The reservation takes the range back first, so nothing can reach the chunks once returned.
  std::byte* from = base_ + keep_chunks * chunk_bytes_;
  const size_t bytes = (chunk_ids_.size() - keep_chunks) * chunk_bytes_;
  if (::mmap(from, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
             0) == MAP_FAILED)
    fail("cannot unmap returned KV chunks", errno);
  const std::vector<uint64_t> returned(chunk_ids_.begin() + keep_chunks, chunk_ids_.end());
  chunk_ids_.resize(keep_chunks);
  server_->call(ipc::op::kKvReturn, ipc::make_kv_return_args(returned));
  return blocks();
}

void LeasedKvMemory::wait_for_memory() {
  // Another worker frees memory on its own schedule; the server has no way to call back.
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

}  // namespace hearth
