// Text that came from outside (a peer's bytes, a name it chose, a parser's excerpt of its input)
// made fit for a JSON string and a log line, so that an error about bad input can always be
// sent and logged.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "base/utf8.h"

namespace hearth::ipc {

// `text` with every byte that is not part of well-formed UTF-8, and every control character
// (C0 and DEL), written as \xNN; the rest passes unchanged. Longer than `max_bytes`: cut at a
// character boundary, with "..." appended.
std::string printable(std::string_view text, std::size_t max_bytes = std::string_view::npos);

}  // namespace hearth::ipc
