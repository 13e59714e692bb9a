// The tokenizer image cache's size bound: after an image is added, the least recently used
// images are removed until the directory's images fit a byte budget. "Used" is the file's
// modification time, set to now by every hit (access times are unreliable under relatime and
// noatime). Safe beside other processes: an image is only ever unlinked, never truncated, so a
// process that has it mapped keeps reading it (the inode lives until the last mapping goes);
// one that loses the race to open it simply misses and rebuilds; two trimming at once at worst
// both try to unlink the same file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace hearth::tok {

// 128 MiB: a few dozen large-vocabulary images (Llama 3's is a few MB).
inline constexpr uint64_t kDefaultImageCacheBudget = uint64_t(128) << 20;

// Marks `image` as just used. Errors are ignored (an image of another user's cache that we
// may read but not touch just ages).
void mark_image_used(const std::filesystem::path& image);

// Removes the least recently used images (*.tokimg) of `dir` until the rest total at most
// `budget` bytes, never `keep` (the image just written, in use by the caller), and leftover
// temporary files of writers that died over an hour ago. Returns the files removed.
std::vector<std::filesystem::path> trim_image_cache(const std::filesystem::path& dir,
                                                    uint64_t budget,
                                                    const std::filesystem::path& keep);

}  // namespace hearth::tok
