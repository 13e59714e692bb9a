#include "worker/tp/shared_exchange.h"

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace hearth {

namespace {

constexpr uint64_t kMagic = 0x6870742d78636867;  // "hearth tp exchange"
constexpr uint32_t kLayoutVersion = 1;
constexpr size_t kHeaderBytes = 4096;
// The longest sleep between two looks at the peers: how late a death is noticed at most.
constexpr std::chrono::milliseconds kPeerCheckEvery{20};

void futex_wait(uint32_t* word, uint32_t expected, std::chrono::milliseconds for_at_most) {
  timespec ts{};
  ts.tv_sec = for_at_most.count() / 1000;
  ts.tv_nsec = (for_at_most.count() % 1000) * 1'000'000;
  // Not FUTEX_PRIVATE: the word is in a mapping other processes share. EAGAIN (the word moved),
  // EINTR and ETIMEDOUT all mean "look again".
  ::syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(uint32_t* word) {
  ::syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

struct SharedExchange::Header {
  uint64_t magic;
  uint32_t version;
  uint32_t world;
  uint64_t capacity;
  uint32_t seq;  // the futex word: bumped at every announcement
  uint32_t pad;
  uint32_t announced[kMaxRanks];  // rounds each rank has offered
  uint64_t count[2][kMaxRanks];   // floats each rank offered in the last round of each set
};

SharedExchange::SharedExchange(UniqueFd fd, void* base, size_t bytes, int world, int rank,
                               size_t capacity)
    : fd_(std::move(fd)),
      base_(base),
      bytes_(bytes),
      world_(world),
      rank_(rank),
      capacity_(capacity) {}

SharedExchange::SharedExchange(SharedExchange&& other) noexcept
    : fd_(std::move(other.fd_)),
      base_(std::exchange(other.base_, nullptr)),
      bytes_(other.bytes_),
      world_(other.world_),
      rank_(other.rank_),
      capacity_(other.capacity_),
      rounds_(other.rounds_) {}

SharedExchange::~SharedExchange() {
  if (base_) ::munmap(base_, bytes_);
}

namespace {

size_t total_bytes(int world, size_t capacity) {
  return kHeaderBytes + 2 * size_t(world) * capacity * sizeof(float);
}

void check_world(int world, int rank) {
  if (world < 2 || world > SharedExchange::kMaxRanks || rank < 0 || rank >= world)
    throw std::runtime_error("tensor-parallel exchange: rank " + std::to_string(rank) + " of " +
                             std::to_string(world) + " is not a rank of a group of 2 to " +
                             std::to_string(SharedExchange::kMaxRanks));
}

void* map_shared(int fd, size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    throw std::runtime_error(std::string("tensor-parallel exchange: mmap: ") +
                             std::strerror(errno));
  return p;
}

}  // namespace

SharedExchange SharedExchange::create(int world, int rank, size_t capacity_floats) {
  check_world(world, rank);
  if (capacity_floats == 0 || capacity_floats > (size_t(1) << 32))
    throw std::runtime_error("tensor-parallel exchange: a slot of " +
                             std::to_string(capacity_floats) + " floats");
  UniqueFd fd(::memfd_create("hearth-tp-exchange", MFD_CLOEXEC));
  if (!fd) throw std::runtime_error(std::string("memfd_create: ") + std::strerror(errno));
  const size_t bytes = total_bytes(world, capacity_floats);
  if (::ftruncate(fd.get(), off_t(bytes)) != 0)
    throw std::runtime_error(std::string("tensor-parallel exchange: ftruncate: ") +
                             std::strerror(errno));
  void* base = map_shared(fd.get(), bytes);  // zero-filled: every rank at round 0
  SharedExchange ex(std::move(fd), base, bytes, world, rank, capacity_floats);
  Header& h = ex.header();
  h.magic = kMagic;
  h.version = kLayoutVersion;
  h.world = uint32_t(world);
  h.capacity = capacity_floats;
  return ex;
}

SharedExchange SharedExchange::attach(UniqueFd fd, int world, int rank) {
  check_world(world, rank);
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      size_t(st.st_size) < kHeaderBytes)
    throw std::runtime_error("tensor-parallel exchange: the descriptor is not a shared buffer");
  const size_t bytes = size_t(st.st_size);
  void* base = map_shared(fd.get(), bytes);
  const auto& h = *static_cast<const Header*>(base);
  const uint64_t capacity = h.capacity;
  if (h.magic != kMagic || h.version != kLayoutVersion || h.world != uint32_t(world) ||
      capacity == 0 || capacity > (uint64_t(1) << 32) || total_bytes(world, capacity) != bytes) {
    ::munmap(base, bytes);
    throw std::runtime_error("tensor-parallel exchange: the shared buffer is not one for " +
                             std::to_string(world) + " ranks (bad header or size)");
  }
  return SharedExchange(std::move(fd), base, bytes, world, rank, size_t(capacity));
}

SharedExchange::Header& SharedExchange::header() const {
  static_assert(sizeof(Header) <= kHeaderBytes);
  return *static_cast<Header*>(base_);
}

float* SharedExchange::slot(int set, int rank) const {
  return reinterpret_cast<float*>(static_cast<std::byte*>(base_) + kHeaderBytes) +
         (size_t(set) * world_ + rank) * capacity_;
}

void SharedExchange::wait_for_round(uint32_t round, std::chrono::milliseconds timeout,
                                    const PeerCheck& peer_check) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  Header& h = header();
  std::atomic_ref<uint32_t> seq(h.seq);
  for (;;) {
    // seq before the announcements: an announcement after this look changes seq, so the
    // futex wait below returns at once instead of missing it.
    const uint32_t seen = seq.load(std::memory_order_seq_cst);
    int missing = -1;
    for (int r = 0; r < world_ && missing < 0; ++r)
      if (int32_t(std::atomic_ref<uint32_t>(h.announced[r]).load(std::memory_order_acquire) -
                  round) < 0)
        missing = r;
    if (missing < 0) return;
    if (peer_check) {
      const std::string dead = peer_check();
      if (!dead.empty()) throw std::runtime_error(dead);
    }
    const Clock::time_point now = Clock::now();
    if (now >= deadline)
      throw std::runtime_error("tensor-parallel rank " + std::to_string(missing) +
                               " did not reach the exchange within " +
                               std::to_string(timeout.count()) + " ms (rank " +
                               std::to_string(rank_) + " waited)");
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    futex_wait(&h.seq, seen, std::clamp(left, std::chrono::milliseconds(1), kPeerCheckEvery));
  }
}

void SharedExchange::exchange(
    std::span<const float> mine,
    const std::function<void(std::span<const std::span<const float>>)>& use,
    std::chrono::milliseconds timeout, const PeerCheck& peer_check) {
  if (mine.size() > capacity_)
    throw std::runtime_error("tensor-parallel exchange: an offer of " +
                             std::to_string(mine.size()) + " floats, the slots hold " +
                             std::to_string(capacity_));
  Header& h = header();
  const int set = int(rounds_ & 1);
  std::copy(mine.begin(), mine.end(), slot(set, rank_));
  h.count[set][rank_] = mine.size();
  ++rounds_;
  std::atomic_ref<uint32_t>(h.announced[rank_]).store(rounds_, std::memory_order_release);
  std::atomic_ref<uint32_t>(h.seq).fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(&h.seq);
  wait_for_round(rounds_, timeout, peer_check);
  std::vector<std::span<const float>> all(static_cast<size_t>(world_), std::span<const float>{});
  for (int r = 0; r < world_; ++r) {
    const uint64_t n = h.count[set][r];
    if (n > capacity_)
      throw std::runtime_error("tensor-parallel rank " + std::to_string(r) + " announced " +
                               std::to_string(n) + " floats, more than a slot holds");
    all[size_t(r)] = {slot(set, r), size_t(n)};
  }
  use(all);
}

}  // namespace hearth
