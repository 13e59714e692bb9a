// A served model's small files (tokenizer.json, its config, generation_config.json and the
// tokenizer image) as sealed memfds: the server writes each once at load and attaches a
// duplicate of every one to each manifest reply; a worker checks and maps them read-only
// instead of receiving megabytes of escaped JSON text it would have to parse before use.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/unique_fd.h"
#include "base/mapped_file.h"
#include "weight-server/sharing/manifest.h"
#include "weight-server/sharing/sealed_memfd.h"

namespace hearth {

// Server side: the files in descriptor order and their manifest entries.
struct SharedFileSet {
  std::vector<ManifestFile> entries;  // entries[i].fd == i
  std::vector<SealedMemfd> memfds;    // memfds[i] holds entries[i]

  // A duplicate of every memfd, in index order, for one manifest reply.
  std::vector<UniqueFd> duplicates() const;
};

// Writes each non-empty file (name, bytes) into a sealed memfd named after `model` and the
// file. Empty files are left out: the manifest calls them absent.
SharedFileSet share_files(
    const std::string& model,
    const std::vector<std::pair<std::string_view, std::span<const std::byte>>>& files);

// Worker side: the received files, mapped read-only. Copies share the mappings.
class SharedFiles {
 public:
  SharedFiles() = default;

  // Checks and maps `fds` (the manifest reply's descriptors, in index order) as `manifest`'s
  // files: each must be a memfd sealed against writing, growing and shrinking, of the size
  // the manifest gives, whose bytes have its xxh3. A file failing a check throws
  // std::runtime_error naming the model and the file, except the tokenizer image, which a
  // worker can do without: it is dropped and image_refusal() says why. Every descriptor is
  // closed either way.
  static SharedFiles receive(const Manifest& manifest, std::vector<UniqueFd> fds);

  // The file's bytes; empty when it is absent (or the refused image).
  std::span<const std::byte> bytes(std::string_view name) const;
  std::string_view text(std::string_view name) const;
  // Keeps the mapping behind bytes(name) alive (null when absent).
  std::shared_ptr<const void> owner(std::string_view name) const;
  // Why the tokenizer image was refused; "" when it was accepted or never sent.
  const std::string& image_refusal() const { return image_refusal_; }

 private:
  std::map<std::string, std::shared_ptr<const MappedFile>, std::less<>> files_;
  std::string image_refusal_;
};

}  // namespace hearth
