// Assembles a tokenizer image (image_format.h) from the settings JSON and the built BPE tables.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "bpe_tables.h"
#include "image_format.h"

namespace hearth::tok {

// The image bytes, sealed. `source_hash` is the XXH3-128 of the tokenizer.json they came from.
std::vector<std::byte> write_image(std::string_view settings_json, const BpeTableData& tables,
                                   const Digest128& source_hash);

// Recomputes the header's checksum over the image's current bytes (which must hold at least a
// header and header.total_size bytes). write_image seals; tests reseal images they edit.
void seal_image(std::span<std::byte> image);

}  // namespace hearth::tok
