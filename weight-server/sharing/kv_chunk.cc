#include "weight-server/sharing/kv_chunk.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <utility>

namespace hearth {

namespace {

constexpr int kRequiredKvSeals = F_SEAL_GROW | F_SEAL_SHRINK;

[[noreturn]] void fail(const std::string& what, int err) {
  throw std::runtime_error(what + ": " + std::strerror(err));
}

class MemfdKvChunk final : public KvChunkMemory {
 public:
  explicit MemfdKvChunk(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd export_fd() const override {
    UniqueFd copy(::fcntl(fd_.get(), F_DUPFD_CLOEXEC, 0));
    if (!copy) fail("cannot duplicate a KV chunk memfd", errno);
    return copy;
  }
  UniqueFd export_read_only_fd() const override {
    // A new open file description, read-only: the memfd's own is read-write.
    const std::string path = "/proc/self/fd/" + std::to_string(fd_.get());
    UniqueFd reader(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!reader) fail("cannot reopen a KV chunk memfd read-only", errno);
    return reader;
  }

 private:
  UniqueFd fd_;
};

class MemfdKvRange final : public KvChunkRange {
 public:
  explicit MemfdKvRange(uint64_t bytes) : bytes_(bytes) {
    // Address space only: nothing is backed until a chunk is mapped over it.
    void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      fail("cannot reserve " + std::to_string(bytes >> 20) + " MiB of address space for KV", errno);
    base_ = static_cast<std::byte*>(p);
  }
  ~MemfdKvRange() override { ::munmap(base_, bytes_); }
  MemfdKvRange(const MemfdKvRange&) = delete;
  MemfdKvRange& operator=(const MemfdKvRange&) = delete;

  std::byte* base() const override { return base_; }
  void map(uint64_t offset, int fd, uint64_t bytes, const std::string& label) override {
    map_with(PROT_READ | PROT_WRITE, offset, fd, bytes, label);
  }
  void map_read_only(uint64_t offset, int fd, uint64_t bytes, const std::string& label) override {
    map_with(PROT_READ, offset, fd, bytes, label);
  }
  void unmap(uint64_t offset, uint64_t bytes) override {
    // Mapping the reservation back over it drops the chunk in one step.
    if (::mmap(base_ + offset, bytes, PROT_NONE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED)
      fail("cannot unmap a KV chunk", errno);
  }

 private:
  void map_with(int prot, uint64_t offset, int fd, uint64_t bytes, const std::string& label) {
    check_kv_chunk_memfd(fd, bytes, label);
    if (offset > bytes_ || bytes > bytes_ - offset)
      throw std::runtime_error(label + ": outside the reserved range");
    if (::mmap(base_ + offset, bytes, prot, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
      fail(label + ": cannot map", errno);
  }

  std::byte* base_ = nullptr;
  uint64_t bytes_;
};

}  // namespace

void KvChunkRange::map_read_only(uint64_t, int, uint64_t, const std::string& label) {
  throw std::runtime_error(label + ": this KV range cannot map a chunk read-only yet");
}

std::unique_ptr<KvChunkRange> reserve_memfd_kv_range(uint64_t bytes) {
  return std::make_unique<MemfdKvRange>(bytes);
}

std::unique_ptr<KvChunkMemory> create_memfd_kv_chunk(uint64_t bytes, const std::string& name) {
  return std::make_unique<MemfdKvChunk>(create_kv_chunk_memfd(bytes, name));
}

uint64_t kv_chunk_bytes_for(uint64_t block_bytes) {
  if (block_bytes == 0) throw std::runtime_error("a KV block of 0 bytes");
  const uint64_t g = std::gcd(block_bytes, kKvChunkAlignment);
  const uint64_t blocks = kKvChunkAlignment / g;
  if (block_bytes > kMaxKvChunkBytes / blocks)
    throw std::runtime_error("a KV block of " + std::to_string(block_bytes) +
                             " bytes makes chunks (whole blocks, 2 MiB-aligned) over 1 GiB; "
                             "choose a kv_block_size that makes the block a power of two");
  const uint64_t lcm = blocks * block_bytes;
  if (block_bytes < kKvChunkAlignment || blocks >= kMinKvChunkBlocks) return lcm;
  const uint64_t wanted = (kMinKvChunkBlocks + blocks - 1) / blocks;
  return lcm * std::max<uint64_t>(1, std::min(wanted, kMaxKvChunkBytes / lcm));
}

UniqueFd create_kv_chunk_memfd(uint64_t bytes, const std::string& name) {
  UniqueFd fd(::memfd_create(name.substr(0, 200).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) fail("cannot create the KV chunk memfd '" + name + "'", errno);
  if (::ftruncate(fd.get(), off_t(bytes)) != 0)
    fail("cannot size the KV chunk memfd '" + name + "' to " + std::to_string(bytes), errno);
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0)
    fail("cannot seal the KV chunk memfd '" + name + "'", errno);
  return fd;
}

void check_kv_chunk_memfd(int fd, uint64_t bytes, const std::string& label) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(label + ": cannot stat the received descriptor", errno);
  if (!S_ISREG(st.st_mode))
    throw std::runtime_error(label + ": the received descriptor is not a memfd");
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & kRequiredKvSeals) != kRequiredKvSeals)
    throw std::runtime_error(label +
                             ": the received KV chunk is not sealed against growing and "
                             "shrinking; refusing to map memory the sender could truncate");
  if (uint64_t(st.st_size) != bytes)
    throw std::runtime_error(label + ": the received KV chunk holds " + std::to_string(st.st_size) +
                             " bytes, " + std::to_string(bytes) + " were leased");
}

}  // namespace hearth
