// Byte strings inside the protocol's JSON: standard base64 (RFC 4648, with padding), and the
// little-endian packing of fixed-size integers into them. Long lists of numbers (a prefix's token
// ids, its blocks' keys and places) travel as one such string rather than as JSON arrays, whose
// building, dumping and parsing cost a shared-prefix lookup most of its time (issue 22).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::ipc {

std::string base64_encode(std::span<const std::byte> bytes);
// The bytes of a canonical base64 string (length a multiple of 4, padding only at its end, the
// unused bits of the last character zero), or nullopt for anything else: there is one spelling
// of each byte string, so a peer cannot hide bytes in one.
std::optional<std::vector<std::byte>> base64_decode(std::string_view text);
// The bytes `text` would decode to, from its length alone (0 when it is not a multiple of 4):
// lets a parser refuse an oversized string before decoding it.
std::size_t base64_decoded_size_bound(std::string_view text);

// Little-endian appends and reads; `at` is a byte offset the caller keeps in range.
void put_u64(std::vector<std::byte>& out, std::uint64_t value);
void put_u32(std::vector<std::byte>& out, std::uint32_t value);
std::uint64_t get_u64(std::span<const std::byte> bytes, std::size_t at);
std::uint32_t get_u32(std::span<const std::byte> bytes, std::size_t at);

}  // namespace hearth::ipc
