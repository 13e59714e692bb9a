// Opens a tokenizer image (image_format.h) in place: checks it completely, then hands out views
// of its sections. Nothing in an image is trusted before it is checked: the header fields, the
// checksum, every section's bounds and alignment, every offset and id inside the tables, and
// that every token spelling is whole UTF-8 characters, so that a corrupted, truncated or
// hostile image is refused with an error and lookups and decodes on an accepted one stay in
// bounds and terminate.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "bpe_tables.h"
#include "image_format.h"

namespace hearth::tok {

struct ImageContents {
  std::string_view settings;  // JSON, not yet parsed
  BpeTables tables;
  Digest128 source_hash;
};

// Views into `image`, which must stay alive and unchanged while they are used. Throws
// std::runtime_error starting "tokenizer image: " and naming what is wrong.
ImageContents read_image(std::span<const std::byte> image);

// The source hash of a plausible image (size, magic and version checked, nothing else):
// enough to tell whether an image was built from some tokenizer.json before opening it.
Digest128 peek_source_hash(std::span<const std::byte> image);

}  // namespace hearth::tok
