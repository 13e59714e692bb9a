#include "image_writer.h"

#include <cstring>

#include "base/digest.h"

namespace hearth::tok {
namespace {

size_t align_up(size_t n) {
  return (n + kSectionAlign - 1) / kSectionAlign * kSectionAlign;
}

template <typename T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

std::span<const std::byte> bytes_of(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

}  // namespace

std::vector<std::byte> write_image(std::string_view settings_json, const BpeTableData& tables,
                                   const Digest128& source_hash) {
  // In Section order.
  const std::array<std::span<const std::byte>, kSectionCount> payloads = {
      bytes_of(settings_json),    bytes_of(tables.strings), bytes_of(tables.vocab),
      bytes_of(tables.id_tokens), bytes_of(tables.merges),  bytes_of(tables.char_ids)};

  ImageHeader header{};
  header.magic = kImageMagic;
  header.version = kImageVersion;
  header.header_size = sizeof(ImageHeader);
  header.source_hash = source_hash;
  header.section_count = kSectionCount;
  size_t offset = align_up(sizeof(ImageHeader));
  for (size_t k = 0; k < kSectionCount; ++k) {
    header.sections[k] = {static_cast<uint32_t>(k), 0, offset, payloads[k].size()};
    offset = align_up(offset + payloads[k].size());
  }
  header.total_size = offset;

  std::vector<std::byte> image(offset);  // zero-filled: padding is zero
  std::memcpy(image.data(), &header, sizeof(header));
  for (size_t k = 0; k < kSectionCount; ++k) {
    if (!payloads[k].empty()) {
      std::memcpy(image.data() + header.sections[k].offset, payloads[k].data(), payloads[k].size());
    }
  }
  seal_image(image);
  return image;
}

void seal_image(std::span<std::byte> image) {
  ImageHeader header;
  std::memcpy(&header, image.data(), sizeof(header));
  header.checksum = xxh3_128(image.data() + kChecksummedFrom, header.total_size - kChecksummedFrom);
  std::memcpy(image.data() + offsetof(ImageHeader, checksum), &header.checksum,
              sizeof(header.checksum));
}

}  // namespace hearth::tok
