// Scratch directories for tests, fresh under /tmp (mode 0700, from mkdtemp) and removed with
// their contents: TempDir for one test, process_scratch_dir() for a whole test process.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace hearth::test {

// A new directory /tmp/hearth-test-XXXXXX, mode 0700.
inline std::filesystem::path make_temp_dir() {
  char pattern[] = "/tmp/hearth-test-XXXXXX";
  if (::mkdtemp(pattern) == nullptr) throw std::runtime_error("mkdtemp failed");
  return pattern;
}

class TempDir {
 public:
  TempDir() : path_(make_temp_dir()) {}
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// The directory for what lives as long as the test process: synthetic models that
// function-local static caches keep open for every test the process runs, and files each
// process writes under one name. ctest runs each test in its own process, in parallel, so
// mkdtemp's unique name is what keeps the processes apart. Made on first use, removed with its
// contents at exit by the process that made it only: a forked child that exits runs the same
// static destructors and must not take the directory from its parent.
inline const std::filesystem::path& process_scratch_dir() {
  struct Scratch {
    std::filesystem::path path = make_temp_dir();
    pid_t owner = ::getpid();
    ~Scratch() {
      std::error_code ec;
      if (::getpid() == owner) std::filesystem::remove_all(path, ec);
    }
  };
  static const Scratch scratch;
  return scratch.path;
}

}  // namespace hearth::test
