#include "weight-server/daemon/requester_identity.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace hearth {

namespace {

// setfsuid/setfsgid return the previous value and never fail loudly: asking for an invalid
// id (-1) changes nothing and returns the current one, which is how a change is verified.
uid_t set_fsuid(uid_t uid) {
  return uid_t(::syscall(SYS_setfsuid, uid));
}
gid_t set_fsgid(gid_t gid) {
  return gid_t(::syscall(SYS_setfsgid, gid));
}
uid_t current_fsuid() {
  return set_fsuid(uid_t(-1));
}
gid_t current_fsgid() {
  return set_fsgid(gid_t(-1));
}

// This thread's supplementary groups only (glibc's setgroups() applies to every thread).
int set_thread_groups(const std::vector<gid_t>& groups) {
  return int(::syscall(SYS_setgroups, groups.size(), groups.data()));
}

}  // namespace

std::string Requester::describe() const {
  return "uid " + std::to_string(uid) + " (gid " + std::to_string(gid) + ")";
}

FileIdentityScope::FileIdentityScope(const Requester& requester) {
  if (requester.uid == ::geteuid()) return;  // the server's own files are its own to read
  const int n = ::getgroups(0, nullptr);
  old_groups_.resize(size_t(std::max(n, 0)));
  if (n > 0 && ::getgroups(n, old_groups_.data()) != n)
    throw std::runtime_error(std::string("getgroups: ") + std::strerror(errno));
  old_uid_ = current_fsuid();
  old_gid_ = current_fsgid();
  // Groups and gid first: after the uid changes, root's file capabilities are gone, but the
  // ones to change ids stay until restore().
  if (set_thread_groups(requester.groups) != 0) {
    const int error = errno;
    throw std::runtime_error(
        "the server (uid " + std::to_string(::geteuid()) + ") cannot open files as " +
        requester.describe() + " (" + std::strerror(error) +
        "), and does not open them with its own rights for another uid; run hearth-server as "
        "root to let other uids load models, or load as uid " +
        std::to_string(::geteuid()));
  }
  switched_ = true;
  set_fsgid(requester.gid);
  set_fsuid(requester.uid);
  if (current_fsgid() != requester.gid || current_fsuid() != requester.uid) {
    restore();
    throw std::runtime_error("the server cannot open files as " + requester.describe());
  }
}

FileIdentityScope::~FileIdentityScope() {
  if (switched_) restore();
}

void FileIdentityScope::restore() noexcept {
  set_fsuid(old_uid_);
  set_fsgid(old_gid_);
  set_thread_groups(old_groups_);
  // A thread left with another identity would open later loads' files wrongly: never.
  if (current_fsuid() != old_uid_ || current_fsgid() != old_gid_) std::abort();
  switched_ = false;
}

}  // namespace hearth
