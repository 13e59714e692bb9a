#include "kernels/nccl_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace hearth::kernels::nccl {

namespace {

std::string library_path() {
  const char* env = std::getenv("HEARTH_NCCL_LIBRARY");
  return env && *env ? env : "libnccl.so.2";
}

template <typename Fn>
void resolve(void* handle, const std::string& path, Fn& fn, const char* name) {
  fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (!fn) throw std::runtime_error("NCCL library " + path + " has no entry point " + name);
}

Library load() {
  const std::string path = library_path();
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept for the life of the process
  if (!h)
    throw std::runtime_error("cannot load NCCL (" + path + "): " + dlerror() +
                             "; set HEARTH_NCCL_LIBRARY to libnccl.so.2's path");
  Library lib{};
  resolve(h, path, lib.get_unique_id, "ncclGetUniqueId");
  resolve(h, path, lib.comm_init_rank, "ncclCommInitRank");
  resolve(h, path, lib.comm_init_all, "ncclCommInitAll");
  resolve(h, path, lib.comm_destroy, "ncclCommDestroy");
  resolve(h, path, lib.all_reduce, "ncclAllReduce");
  resolve(h, path, lib.group_start, "ncclGroupStart");
  resolve(h, path, lib.group_end, "ncclGroupEnd");
  resolve(h, path, lib.error_string, "ncclGetErrorString");
  resolve(h, path, lib.get_version, "ncclGetVersion");
  return lib;
}

}  // namespace

const Library& library() {
  static const Library lib = load();  // a throw leaves it for the next call
  return lib;
}

void check(Result r, const char* what) {
  if (r != kSuccess)
    throw std::runtime_error(std::string("NCCL error in ") + what + ": " +
                             library().error_string(r) + " (" + std::to_string(r) + ")");
}

}  // namespace hearth::kernels::nccl
