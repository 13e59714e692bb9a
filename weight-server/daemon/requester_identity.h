// Opening a model's files as the client that asked for the load, not as the server. A server
// running as root (or as any uid other than its admin's) must not become a confused deputy:
// an admin `load` of a directory the admin cannot read would otherwise hand the admin the
// files (tokenizer.json and the rest travel to workers as descriptors).
//
// Why open as the requester rather than check permissions: the kernel applies every rule
// (each directory component's search bit, ACLs, the requester's supplementary groups,
// symbolic links followed with the requester's rights) at the very open that reads the file,
// so there is no gap between a check and the use to race, and no rule of ours to get wrong.
// The switch is per thread (setfsuid/setfsgid/setgroups as raw system calls: glibc's
// setgroups would change every thread of the server) and lasts only while the files are
// opened; the load runs on a thread of its own.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace hearth {

struct Requester {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;     // supplementary groups, as the kernel reported them
  std::string describe() const;  // "uid 65534 (gid 65534)"
};

// While alive, the calling thread opens files as `requester`. Nothing changes when the
// requester is the server's own uid. Throws std::runtime_error saying so when the server
// cannot take another uid's file identity (it is not root): it then refuses to open anything
// on that uid's behalf rather than open it with its own rights.
class FileIdentityScope {
 public:
  explicit FileIdentityScope(const Requester& requester);
  ~FileIdentityScope();
  FileIdentityScope(const FileIdentityScope&) = delete;
  FileIdentityScope& operator=(const FileIdentityScope&) = delete;

 private:
  void restore() noexcept;

  bool switched_ = false;
  uid_t old_uid_ = 0;
  gid_t old_gid_ = 0;
  std::vector<gid_t> old_groups_;
};

}  // namespace hearth
