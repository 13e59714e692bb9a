#include "cache_budget.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <system_error>
#include <tuple>

namespace hearth::tok {

namespace {

namespace fs = std::filesystem;

struct Image {
  fs::path path;
  uint64_t bytes;
  timespec used;
};

bool older(const Image& a, const Image& b) {
  // The name breaks ties, so concurrent trimmers agree on the order.
  return std::tie(a.used.tv_sec, a.used.tv_nsec, a.path) <
         std::tie(b.used.tv_sec, b.used.tv_nsec, b.path);
}

}  // namespace

void mark_image_used(const fs::path& image) {
  ::utimensat(AT_FDCWD, image.c_str(), nullptr, 0);  // both times to now
}

std::vector<fs::path> trim_image_cache(const fs::path& dir, uint64_t budget, const fs::path& keep) {
  std::vector<Image> images;
  std::vector<fs::path> removed;
  uint64_t total = 0;
  const time_t stale_before = std::time(nullptr) - 3600;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    // A temporary file (write_file_atomically's ".NAME.tokimg.XXXXXX") is renamed within
    // moments; one an hour old belongs to a writer that died.
    if (name.starts_with(".") && name.find(".tokimg.") != std::string::npos) {
      if (st.st_mtime < stale_before && ::unlink(entry.path().c_str()) == 0)
        removed.push_back(entry.path());
      continue;
    }
    if (!name.ends_with(".tokimg")) continue;
    images.push_back({entry.path(), uint64_t(st.st_size), st.st_mtim});
    total += uint64_t(st.st_size);
  }
  std::sort(images.begin(), images.end(), older);
  for (const Image& image : images) {
    if (total <= budget) break;
    if (image.path == keep) continue;
    // Gone already (another process trimmed it) counts as removed.
    if (::unlink(image.path.c_str()) == 0 || errno == ENOENT) {
      total -= image.bytes;
      removed.push_back(image.path);
    }
  }
  return removed;
}

}  // namespace hearth::tok
