// The files of a model directory, opened so that the directory cannot make the reader open
// anything else. A model directory may come from a stranger, and the server reads it with its
// own rights on behalf of an admin who may have fewer. So every file is opened beneath the
// directory (openat2 with RESOLVE_BENEATH: a symbolic link may lead elsewhere inside it, never
// out, and never through /proc's magic links), without blocking (a FIFO is refused, not waited
// on), and only as a regular file.
//
// A Hugging Face cache snapshot (.../models--ORG--NAME/snapshots/REVISION) links each file to
// ../../blobs/HASH; there the repository folder, models--ORG--NAME, is the bound instead.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "base/unique_fd.h"
#include "base/read_file.h"

namespace hearth {

class ModelDirectory {
 public:
  // Opens `dir` (which may itself be reached through symbolic links: the caller named it).
  // Throws std::runtime_error "DIR: not a model directory (...)" when it is not a directory.
  static ModelDirectory open(const std::filesystem::path& dir);

  const std::filesystem::path& path() const { return path_; }
  // `name` inside the directory, for messages.
  std::filesystem::path path_of(std::string_view name) const { return path_ / name; }

  // The regular file `name` (one path component), open for reading; an empty UniqueFd when
  // there is no such file. Throws std::runtime_error naming the file when it leads outside the
  // directory, is not a regular file (a directory, FIFO, socket or device) or cannot be opened.
  UniqueFd open_file(std::string_view name) const;

  // The whole of `name`, at most `max_bytes`, or nullopt when there is no such file. Throws as
  // open_file does, and when the file is larger.
  std::optional<std::string> read(std::string_view name,
                                  size_t max_bytes = kMaxTextFileBytes) const;

 private:
  std::filesystem::path path_;
  UniqueFd dir_;         // the directory, which no file may lead out of
  UniqueFd repository_;  // for a cache snapshot, its repository folder: the bound instead
  std::string prefix_;   // the snapshot relative to repository_: "snapshots/REVISION/"
};

}  // namespace hearth
