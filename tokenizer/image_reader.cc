#include "image_reader.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "base/digest.h"
#include "utf8.h"

namespace hearth::tok {
namespace {

[[noreturn]] void refuse(const std::string& what) {
  throw std::runtime_error("tokenizer image: " + what);
}

std::string str(uint64_t n) {
  return std::to_string(n);
}

// The header, after the checks that need nothing but the header: magic, size, version.
ImageHeader read_header(std::span<const std::byte> image) {
  // The magic first, so that a short file of something else is not called a truncated image.
  const size_t magic_bytes = std::min(image.size(), kImageMagic.size());
  if (magic_bytes > 0 && std::memcmp(image.data(), kImageMagic.data(), magic_bytes) != 0) {
    refuse("not a hearth tokenizer image (bad magic)");
  }
  if (image.size() < sizeof(ImageHeader)) {
    refuse("truncated: " + str(image.size()) + " bytes, less than the " + str(sizeof(ImageHeader)) +
           "-byte header");
  }
  ImageHeader h;
  std::memcpy(&h, image.data(), sizeof(h));
  if (h.version != kImageVersion) {
    refuse("format version " + str(h.version) + ", but this build reads only version " +
           str(kImageVersion) + "; rebuild the image");
  }
  return h;
}

template <typename T>
std::span<const T> section_as(std::span<const std::byte> image, const SectionEntry& s) {
  const std::string_view name = section_name(static_cast<Section>(s.kind));
  if (s.size % sizeof(T) != 0) {
    refuse("section '" + std::string(name) + "' has " + str(s.size) +
           " bytes, not a multiple of its " + str(sizeof(T)) + "-byte entries");
  }
  return {reinterpret_cast<const T*>(image.data() + s.offset), s.size / sizeof(T)};
}

bool is_power_of_two(size_t n) {
  return n != 0 && (n & (n - 1)) == 0;
}

bool in_strings(uint64_t offset, uint64_t length, size_t strings_size) {
  return offset <= strings_size && length <= strings_size - offset;
}

bool is_continuation(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

// Decoders walk token spellings character by character, trusting them to be valid UTF-8 (as
// JSON strings are), so every spelling an id can produce must be. With the strings section
// checked to be valid UTF-8 as a whole, it suffices that each starts and ends on a character
// boundary.
void check_id_tokens(std::span<const TokenRef> refs, std::string_view strings) {
  if (refs.size() > static_cast<size_t>(kMaxTokenId)) {
    refuse("id_tokens has " + str(refs.size()) + " ids, more than the limit " + str(kMaxTokenId));
  }
  for (size_t id = 0; id < refs.size(); ++id) {
    const TokenRef& r = refs[id];
    if (r.length == TokenRef::kNone) continue;
    if (!in_strings(r.offset, r.length, strings.size())) {
      refuse("id_tokens[" + str(id) + "]: bytes [" + str(r.offset) + ", +" + str(r.length) +
             ") lie outside the strings section (" + str(strings.size()) + " bytes)");
    }
    const size_t end = size_t{r.offset} + r.length;
    const bool whole_chars =
        r.length == 0 || (!is_continuation(strings[r.offset]) &&
                          (end == strings.size() || !is_continuation(strings[end])));
    if (!whole_chars) {
      refuse("id_tokens[" + str(id) + "]: the token does not start and end on whole characters");
    }
  }
}

// Returns the number of entries.
size_t check_vocab(std::span<const VocabSlot> slots, size_t strings_size, size_t id_count) {
  if (!is_power_of_two(slots.size())) {
    refuse("vocab has " + str(slots.size()) + " slots, not a power of two");
  }
  size_t used = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    const VocabSlot& s = slots[i];
    if (s.length == VocabSlot::kEmpty) continue;
    ++used;
    if (!in_strings(s.offset, s.length, strings_size)) {
      refuse("vocab slot " + str(i) + ": bytes [" + str(s.offset) + ", +" + str(s.length) +
             ") lie outside the strings section (" + str(strings_size) + " bytes)");
    }
    if (s.id < 0 || static_cast<size_t>(s.id) >= id_count) {
      refuse("vocab slot " + str(i) + ": id " + std::to_string(s.id) + " is outside [0, " +
             str(id_count) + ")");
    }
  }
  // A probe stops only at an empty slot.
  if (used == slots.size()) refuse("vocab has no empty slot");
  return used;
}

void check_merges(std::span<const MergeSlot> slots, size_t id_count) {
  if (!is_power_of_two(slots.size())) {
    refuse("merges has " + str(slots.size()) + " slots, not a power of two");
  }
  size_t used = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    const MergeSlot& s = slots[i];
    if (s.key == MergeSlot::kEmpty) continue;
    ++used;
    if (s.merged < 0 || static_cast<size_t>(s.merged) >= id_count) {
      refuse("merges slot " + str(i) + ": merged id " + std::to_string(s.merged) +
             " is outside [0, " + str(id_count) + ")");
    }
  }
  if (used == slots.size()) refuse("merges has no empty slot");
}

void check_char_ids(std::span<const int32_t> ids, size_t id_count) {
  if (ids.size() > kCharTableLimit) {
    refuse("char_ids has " + str(ids.size()) + " entries, more than " + str(kCharTableLimit));
  }
  for (size_t cp = 0; cp < ids.size(); ++cp) {
    if (ids[cp] < -1 || (ids[cp] >= 0 && static_cast<size_t>(ids[cp]) >= id_count)) {
      refuse("char_ids[" + str(cp) + "]: id " + std::to_string(ids[cp]) + " is outside [-1, " +
             str(id_count) + ")");
    }
  }
}

}  // namespace

Digest128 peek_source_hash(std::span<const std::byte> image) {
  return read_header(image).source_hash;
}

ImageContents read_image(std::span<const std::byte> image) {
  if (reinterpret_cast<uintptr_t>(image.data()) % alignof(ImageHeader) != 0) {
    refuse("not 8-byte aligned in memory (map the file, or copy it into an aligned buffer)");
  }
  const ImageHeader h = read_header(image);
  if (h.header_size != sizeof(ImageHeader)) {
    refuse("header size " + str(h.header_size) + ", expected " + str(sizeof(ImageHeader)));
  }
  if (h.total_size > image.size()) {
    refuse("truncated: " + str(image.size()) + " bytes, but the header says " + str(h.total_size));
  }
  if (h.total_size < image.size()) {
    refuse(str(image.size()) + " bytes, but the header says " + str(h.total_size) +
           " (trailing bytes)");
  }
  if (xxh3_128(image.data() + kChecksummedFrom, image.size() - kChecksummedFrom) != h.checksum) {
    refuse("checksum mismatch: the image is corrupted");
  }
  // From here on the bytes are what some writer sealed; they are still checked, so that an
  // image made by a buggy or hostile writer cannot send a lookup out of bounds.
  if (h.section_count != kSectionCount || h.reserved != 0) {
    refuse("header has " + str(h.section_count) + " sections, expected " + str(kSectionCount));
  }
  for (size_t k = 0; k < kSectionCount; ++k) {
    const SectionEntry& s = h.sections[k];
    const std::string name = "section " + str(k);
    if (s.kind != k || s.reserved != 0) refuse(name + ": malformed directory entry");
    if (s.offset < sizeof(ImageHeader) || s.offset % kSectionAlign != 0) {
      refuse(name + " ('" + std::string(section_name(static_cast<Section>(k))) + "'): offset " +
             str(s.offset) + " is inside the header or misaligned");
    }
    if (s.offset > image.size() || s.size > image.size() - s.offset) {
      refuse(name + " ('" + std::string(section_name(static_cast<Section>(k))) + "'): bytes [" +
             str(s.offset) + ", +" + str(s.size) + ") run past the end (" + str(image.size()) +
             " bytes)");
    }
  }
  auto section = [&](Section s) { return h.sections[static_cast<size_t>(s)]; };

  ImageContents c;
  c.source_hash = h.source_hash;
  const auto settings = section_as<char>(image, section(Section::kSettings));
  c.settings = std::string_view(settings.data(), settings.size());
  const auto strings = section_as<char>(image, section(Section::kStrings));
  c.tables.strings = std::string_view(strings.data(), strings.size());
  c.tables.id_tokens = section_as<TokenRef>(image, section(Section::kIdTokens));
  const auto vocab = section_as<VocabSlot>(image, section(Section::kVocab));
  const auto merges = section_as<MergeSlot>(image, section(Section::kMerges));
  c.tables.char_ids = section_as<int32_t>(image, section(Section::kCharIds));

  const size_t id_count = c.tables.id_tokens.size();
  if (!is_valid_utf8(c.tables.strings)) refuse("the strings section is not valid UTF-8");
  check_id_tokens(c.tables.id_tokens, c.tables.strings);
  c.tables.vocab_size = check_vocab(vocab, strings.size(), id_count);
  check_merges(merges, id_count);
  check_char_ids(c.tables.char_ids, id_count);
  c.tables.vocab = VocabTable(vocab, c.tables.strings);
  c.tables.merges = MergeTable(merges);
  return c;
}

}  // namespace hearth::tok
