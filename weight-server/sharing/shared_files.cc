#include "weight-server/sharing/shared_files.h"

#include <stdexcept>

#include "weight-server/sharing/checksum.h"

namespace hearth {

std::vector<UniqueFd> SharedFileSet::duplicates() const {
  std::vector<UniqueFd> fds;
  fds.reserve(memfds.size());
  for (const SealedMemfd& m : memfds) fds.push_back(m.duplicate());
  return fds;
}

SharedFileSet share_files(
    const std::string& model,
    const std::vector<std::pair<std::string_view, std::span<const std::byte>>>& files) {
  SharedFileSet set;
  for (const auto& [name, bytes] : files) {
    if (bytes.empty()) continue;
    const uint32_t fd = uint32_t(set.memfds.size());
    set.memfds.push_back(SealedMemfd::create("hearth:" + model + ":" + std::string(name), bytes));
    set.entries.push_back(ManifestFile{std::string(name), bytes.size(), xxh3_checksum(bytes), fd});
  }
  return set;
}

namespace {

std::shared_ptr<const MappedFile> map_checked(const ManifestFile& f, UniqueFd fd,
                                              const std::string& label) {
  check_sealed_memfd(fd.get(), f.bytes, label);
  auto mapping =
      std::make_shared<const MappedFile>(MappedFile::map_fd(fd.get(), size_t(f.bytes), label));
  const uint64_t sum = xxh3_checksum(mapping->bytes());
  if (sum != f.xxh3)
    throw std::runtime_error(label + ": xxh3 " + checksum_to_hex(sum) +
                             " differs from the manifest's " + checksum_to_hex(f.xxh3) +
                             ": the received file is not what the server shared");
  return mapping;
}

}  // namespace

SharedFiles SharedFiles::receive(const Manifest& manifest, std::vector<UniqueFd> fds) {
  if (fds.size() != manifest.files.size())
    throw std::runtime_error("the manifest of model '" + manifest.model + "' names " +
                             std::to_string(manifest.files.size()) +
                             " files but its reply carried " + std::to_string(fds.size()) +
                             " descriptors");
  SharedFiles out;
  for (const ManifestFile& f : manifest.files) {
    const std::string label = "model '" + manifest.model + "', shared file " + f.name;
    try {
      out.files_.emplace(f.name, map_checked(f, std::move(fds.at(f.fd)), label));
    } catch (const std::runtime_error& e) {
      if (f.name != kTokenizerImageFile) throw;
      out.image_refusal_ = e.what();
    }
  }
  return out;
}

std::span<const std::byte> SharedFiles::bytes(std::string_view name) const {
  const auto it = files_.find(name);
  return it == files_.end() ? std::span<const std::byte>() : it->second->bytes();
}

std::string_view SharedFiles::text(std::string_view name) const {
  const std::span<const std::byte> b = bytes(name);
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

std::shared_ptr<const void> SharedFiles::owner(std::string_view name) const {
  const auto it = files_.find(name);
  return it == files_.end() ? nullptr : it->second;
}

}  // namespace hearth
