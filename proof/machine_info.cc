#include "proof/machine_info.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "ipc/child_process.h"

namespace hearth::proof {

using json = nlohmann::json;

namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// The value of the first "key : value" line of a /proc file whose key is one of `keys`.
std::string proc_field(const char* file, std::initializer_list<const char*> keys) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon));
    for (const char* k : keys)
      if (key == k) return trim(line.substr(colon + 1));
  }
  return {};
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, sep)) parts.push_back(trim(part));
  return parts;
}

json gpus(const std::filesystem::path& scratch_dir) {
  const std::filesystem::path smi = find_in_path("nvidia-smi");
  if (smi.empty()) return json::array();
  const std::filesystem::path out = scratch_dir / "nvidia-smi.csv",
                              err = scratch_dir / "nvidia-smi.stderr";
  try {
    ChildProcess child = ChildProcess::spawn(
        ChildProcess::Options({smi.string(),
                               "--query-gpu=index,name,uuid,driver_version,memory.total,pci.bus_id",
                               "--format=csv,noheader"})
            .stdout_to(ChildProcess::Stream::file(out))
            .stderr_to(ChildProcess::Stream::file(err)));
    const auto status =
        child.wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(30));
    if (!status) {
      child.kill_group();
      return json{{{"error", "nvidia-smi did not answer within 30 s"}}};
    }
    if (!status->success()) return json{{{"error", "nvidia-smi: " + status->describe()}}};
  } catch (const std::exception& e) {
    return json{{{"error", e.what()}}};
  }
  json list = json::array();
  std::ifstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    const std::vector<std::string> f = split(line, ',');
    if (f.size() < 6) continue;
    list.push_back({{"index", f[0]},
                    {"name", f[1]},
                    {"uuid", f[2]},
                    {"driver", f[3]},
                    {"memory", f[4]},
                    {"pci_bus_id", f[5]}});
  }
  std::error_code ignored;
  std::filesystem::remove(out, ignored);
  std::filesystem::remove(err, ignored);
  return list;
}

}  // namespace

std::filesystem::path find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (!path) return {};
  for (const std::string& dir : split(path, ':')) {
    if (dir.empty()) continue;
    const std::filesystem::path candidate = std::filesystem::path(dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0 && std::filesystem::is_regular_file(candidate))
      return candidate;
  }
  return {};
}

json machine_info(const std::filesystem::path& scratch_dir) {
  json m;
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) == 0) m["hostname"] = host;
  utsname u{};
  if (::uname(&u) == 0) m["os"] = std::string(u.sysname) + " " + u.release + " " + u.machine;
  m["cpu"] = proc_field("/proc/cpuinfo", {"model name", "Model", "Hardware", "cpu model"});
  m["logical_cpus"] = std::thread::hardware_concurrency();
  m["memory"] = proc_field("/proc/meminfo", {"MemTotal"});
  m["gpus"] = gpus(scratch_dir);
  return m;
}

}  // namespace hearth::proof
