#include "weight-server/sharing/sealed_memfd.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace hearth {

namespace {

static_assert(kRequiredWeightSeals == (F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK));

// memfd names are limited to 249 bytes plus the kernel's "memfd:" prefix.
constexpr size_t kMaxMemfdName = 249;

[[noreturn]] void fail(const std::string& what, int err) {
  throw std::runtime_error(what + ": " + std::strerror(err));
}

std::string seal_names(int seals) {
  std::string out;
  auto add = [&](int bit, const char* name) {
    if (seals & bit) out += (out.empty() ? "" : "|") + std::string(name);
  };
  add(F_SEAL_WRITE, "write");
  add(F_SEAL_GROW, "grow");
  add(F_SEAL_SHRINK, "shrink");
  add(F_SEAL_SEAL, "seal");
  return out.empty() ? "none" : out;
}

}  // namespace

SealedMemfd SealedMemfd::create(const std::string& name, std::span<const std::byte> bytes) {
  const std::string label = "memfd '" + name + "'";
  SealedMemfd m;
  m.fd_.reset(
      ::memfd_create(name.substr(0, kMaxMemfdName).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!m.fd_) fail("cannot create " + label, errno);
  if (::ftruncate(m.fd_.get(), static_cast<off_t>(bytes.size())) != 0)
    fail("cannot size " + label + " to " + std::to_string(bytes.size()) + " bytes", errno);
  // pwrite rather than a writable mapping: F_SEAL_WRITE is refused while one exists, and the
  // server never needs the bytes in its own address space.
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(m.fd_.get(), bytes.data() + done, bytes.size() - done, off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write " + label, n < 0 ? errno : EIO);
    done += size_t(n);
  }
  if (::fcntl(m.fd_.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) !=
      0)
    fail("cannot seal " + label, errno);
  m.size_ = bytes.size();
  return m;
}

UniqueFd SealedMemfd::duplicate() const {
  UniqueFd copy(::fcntl(fd_.get(), F_DUPFD_CLOEXEC, 0));
  if (!copy) fail("cannot duplicate a weight memfd", errno);
  return copy;
}

void check_sealed_memfd(int fd, uint64_t size, const std::string& label) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(label + ": cannot stat the received descriptor", errno);
  if (!S_ISREG(st.st_mode))
    throw std::runtime_error(label +
                             ": the received descriptor is not a memfd (not a regular file)");
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0)
    throw std::runtime_error(label + ": the received descriptor is not a sealable memfd (" +
                             std::strerror(errno) + ")");
  if ((seals & kRequiredWeightSeals) != kRequiredWeightSeals)
    throw std::runtime_error(label +
                             ": the received memfd is not sealed against writing, growing "
                             "and shrinking (seals: " +
                             seal_names(seals) +
                             "); refusing to map weights the sender could still change");
  if (uint64_t(st.st_size) != size)
    throw std::runtime_error(label + ": the received memfd holds " + std::to_string(st.st_size) +
                             " bytes, the manifest says " + std::to_string(size));
}

}  // namespace hearth
