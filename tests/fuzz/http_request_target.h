// Fuzz target for hearth's HTTP/1.1 request parser (gateway/http/request_parser.h): the bytes
// a stranger sends the gateway. Its first byte picks how the rest is split into reads; the
// rest is parsed as a connection's byte stream both whole and in those pieces. Refusing is
// fine (a status the server answers with and a printable message); a bug throws FuzzBug: an
// accepted request past a limit, a result that depends on how the bytes were split, a refusal
// with an unexpected status, a crash or a sanitizer report. Returns whether any request was
// accepted.
#pragma once

#include <string_view>

namespace hearth::fuzz {

bool http_request(std::string_view data);

}  // namespace hearth::fuzz
