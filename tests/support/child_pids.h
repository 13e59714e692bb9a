// The children of a process, for tests that kill or watch what a worker spawned.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace hearth::test {

// The pids of `pid`'s children, from every thread's children list (a spawn thread may fork).
inline std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  const std::string task = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& t : std::filesystem::directory_iterator(task)) {
    std::ifstream in(t.path() / "children");
    for (pid_t child; in >> child;) out.push_back(child);
  }
  return out;
}

}  // namespace hearth::test
