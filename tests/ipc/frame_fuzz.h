#pragma once

// The frame codec's fuzz check, shared by the seeded GoogleTest loops (frame_fuzz_test.cc, in
// CI under ASan/UBSan) and the libFuzzer entry point (frame_fuzz_target.cc, HEARTH_LIBFUZZER):
// what must hold for any bytes a peer can send, and the mutations that make such bytes from
// the committed corpus (tests/fuzz/corpus/ipc_frame).

#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "ipc/errors.h"
#include "ipc/frame.h"
#include "ipc/frame_reader.h"
#include "ipc/printable.h"
#include "ipc/protocol.h"
#include "tests/support/fuzz_rng.h"

namespace hearth::fuzz {

inline std::string le32(std::uint32_t n) {
  return {static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
          static_cast<char>((n >> 16) & 0xff), static_cast<char>((n >> 24) & 0xff)};
}

// What a FrameReader made of a byte stream: the frames' bodies and how it stopped.
struct Decoded {
  std::vector<nlohmann::json> bodies;
  std::optional<ipc::FrameError> error;
  bool mid_frame = false;
};

// Feeds `bytes` in pieces whose ends are `cuts` (offsets, ascending; none: one piece).
inline Decoded decode(std::string_view bytes, const std::vector<std::size_t>& cuts,
                      std::size_t max_frame_bytes) {
  ipc::FrameReader reader(max_frame_bytes, /*max_fds=*/0);
  Decoded out;
  std::size_t start = 0;
  auto feed = [&](std::size_t end) {
    if (end <= start) return;
    reader.feed(std::span(bytes.data() + start, end - start));
    start = end;
    while (auto frame = reader.pop()) out.bodies.push_back(std::move(frame->body));
  };
  for (std::size_t cut : cuts) feed(std::min(cut, bytes.size()));
  feed(bytes.size());
  out.error = reader.error();
  out.mid_frame = reader.mid_frame();
  return out;
}

// Everything the protocol layer does with a frame a peer sent, none of which may fail other
// than with the protocol's own errors. Returns a description of what went wrong, or "".
inline std::string check_body(const nlohmann::json& body) {
  if (!body.is_object()) return "a frame decoded to a " + std::string(body.type_name());
  try {
    // Re-encoding what was decoded gives the same value back (strings were valid UTF-8).
    ipc::FrameReader again(ipc::kDefaultMaxFrameBytes, 0);
    if (!again.feed(ipc::encode_frame(body))) return "re-encoded frame refused";
    auto frame = again.pop();
    if (!frame || frame->body != body) return "re-encoded frame decoded differently";
  } catch (const ipc::IpcError& e) {
    return std::string("a decoded frame could not be re-encoded: ") + e.what();
  }
  ipc::request_id_of(body);
  try {
    const ipc::Request request = ipc::parse_request(body);
    if (request.op == ipc::op::kImport) ipc::parse_import_request(request);
    if (request.op == ipc::op::kHello) ipc::check_protocol_version(request.body, "client");
    ipc::optional_string_field(request.body, "model");
  } catch (const ipc::ProtocolError&) {
  }
  try {
    ipc::parse_reply_status(body);
  } catch (const ipc::IpcError&) {
  }
  return "";
}

// The invariants for one input: decoding never crashes, fails only with bad_request or
// too_large, gives the same frames and the same error however the bytes are split across
// reads, and every frame it yields survives the protocol layer and re-encodes to itself. An
// error reply quoting the input can always be encoded.
inline std::string check_frame_bytes(std::string_view bytes, std::uint64_t split_seed,
                                     std::size_t max_frame_bytes = 1 << 16) {
  try {
    const Decoded whole = decode(bytes, {}, max_frame_bytes);
    Rng rng{split_seed};
    std::vector<std::size_t> cuts;
    for (std::size_t at = rng.below(9); at < bytes.size(); at += 1 + rng.below(17))
      cuts.push_back(at);
    const Decoded pieces = decode(bytes, cuts, max_frame_bytes);
    if (whole.bodies != pieces.bodies) return "frames depend on how the bytes were split";
    if (whole.error.has_value() != pieces.error.has_value() ||
        (whole.error && (whole.error->code != pieces.error->code ||
                         whole.error->message != pieces.error->message)))
      return "the error depends on how the bytes were split";
    if (whole.error && whole.error->code != ipc::ErrorCode::kBadRequest &&
        whole.error->code != ipc::ErrorCode::kTooLarge)
      return "unexpected error code " + std::string(ipc::to_string(whole.error->code));
    for (const nlohmann::json& body : whole.bodies)
      if (std::string why = check_body(body); !why.empty()) return why;
    const std::string reply = ipc::encode_frame(
        ipc::make_error_reply(std::nullopt, ipc::ErrorCode::kBadRequest,
                              whole.error ? whole.error->message : std::string(bytes)));
    if (!is_valid_utf8(reply.substr(ipc::kFrameHeaderBytes))) return "an error reply is not UTF-8";
  } catch (const std::exception& e) {
    return std::string("unexpected exception: ") + e.what();
  }
  return "";
}

// Bytes and tokens that reach the interesting corners of the codec and the JSON parser.
inline const std::vector<std::string>& dictionary() {
  static const std::vector<std::string> words = {
      "{",
      "}",
      "[",
      "]",
      "\"",
      ":",
      ",",
      "\\",
      "\\u",
      "\\u0000",
      "\\ud800",
      "\\udc00",
      "\xff",
      "\xc3",
      "\xed\xa0\x80",
      "\xf4\x90",
      "null",
      "true",
      "-0",
      "1e999",
      "-1",
      "18446744073709551616",
      "0.5",
      "\"op\"",
      "\"id\"",
      "\"hello\"",
      "\"import\"",
      "\"allocations\"",
      "\"version\"",
      std::string(1, '\0'),
      "\x01",
      "\n",
      "[[[[[[[[",
      "{\"a\":{\"a\":",
  };
  return words;
}

// One mutation of `data`, with pieces of `other` (another corpus entry) for splicing.
inline void mutate(std::string& data, const std::string& other, Rng& rng) {
  const std::size_t n = data.size();
  switch (rng.below(9)) {
    case 0:  // flip a byte
      if (n) data[rng.below(n)] = static_cast<char>(rng.next());
      break;
    case 1:  // insert a dictionary word
      data.insert(rng.below(n + 1), dictionary()[rng.below(dictionary().size())]);
      break;
    case 2:  // delete a range
      if (n) data.erase(rng.below(n), 1 + rng.below(16));
      break;
    case 3: {  // duplicate a range
      if (!n) break;
      const std::size_t at = rng.below(n);
      data.insert(rng.below(n + 1), data.substr(at, 1 + rng.below(32)));
      break;
    }
    case 4:  // splice the tail of another entry
      if (!other.empty())
        data = data.substr(0, rng.below(n + 1)) + other.substr(rng.below(other.size()));
      break;
    case 5: {  // rewrite the first header's length with an interesting value
      if (n < 4) break;
      const std::uint32_t payload = static_cast<std::uint32_t>(n - 4);
      const std::uint32_t lengths[] = {0,           1,           payload - 1, payload + 1,
                                       payload / 2, 0xffffffffu, 1u << 16,    (1u << 16) + 1};
      data.replace(0, 4, le32(lengths[rng.below(8)]));
      break;
    }
    case 6:  // truncate
      data.resize(rng.below(n + 1));
      break;
    case 7:  // a second frame glued on
      data += other;
      break;
    default:  // a random byte anywhere
      data.insert(rng.below(n + 1), 1, static_cast<char>(rng.next()));
      break;
  }
}

// The committed seed corpus: one raw byte stream (frames with headers) per .bin file.
inline std::vector<std::string> load_corpus(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == ".bin")
      files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> corpus;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    corpus.push_back(ss.str());
  }
  return corpus;
}

}  // namespace hearth::fuzz
