#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/errors.h"

// The messages of the hearth protocol. A request is {"op": NAME, "id": N, ...arguments}; its
// reply is {"id": N, "ok": true, ...results} or {"id": N, "ok": false, "error": {"code": CODE,
// "message": TEXT}}. A reply that does not answer a particular request (a refused connection,
// an unparsable frame) has "id": null. The first request on a connection must be hello.
namespace hearth::ipc {

// Bumped on any incompatible change; hello refuses a peer that speaks another version.
inline constexpr int kProtocolVersion = 2;  // 2: kv_share messages packed (issue 22)

using RequestId = std::uint64_t;

namespace op {
inline constexpr std::string_view kHello =
    "hello";  // {version, client} -> {version, server, client_id, admin}
inline constexpr std::string_view kList = "list";          // models being served
inline constexpr std::string_view kManifest = "manifest";  // {model} -> manifest + file FDs
inline constexpr std::string_view kImport = "import";      // see ImportRequest
inline constexpr std::string_view kRelease = "release";    // {model}: end this client's lease
inline constexpr std::string_view kStats = "stats";
inline constexpr std::string_view kKvLease = "kv_lease";    // see KvLeaseRequest
inline constexpr std::string_view kKvReturn = "kv_return";  // see KvReturnRequest
// A serving worker's (hearth-worker --serve, worker/engine_server.h).
inline constexpr std::string_view kSubmit = "submit";  // {request} -> {request_id}
inline constexpr std::string_view kCancel = "cancel";  // {request_id} -> {cancelled}
inline constexpr std::string_view kEvents = "events";  // {} -> {events}: waits for some
// Admin operations: only the server's own uid may call them.
inline constexpr std::string_view kLoad = "load";
inline constexpr std::string_view kUnload = "unload";
inline constexpr std::string_view kShutdown = "shutdown";
}  // namespace op

bool is_known_op(std::string_view name);
bool is_admin_op(std::string_view name);

// A request whose envelope has been checked. `body` is the whole object: handlers read their
// own arguments from it (see string_field and friends).
struct Request {
  std::string op;
  RequestId id = 0;
  nlohmann::json body;
};

// Checks the envelope (an object with a string "op" and an unsigned integer "id"). Does not
// check that the op is known. Throws ProtocolError(kBadRequest).
Request parse_request(nlohmann::json body);
// The request's id if it has a usable one: lets an error reply to a malformed request still
// name the request it answers.
std::optional<RequestId> request_id_of(const nlohmann::json& body);

// {"op": op, "id": id, ...args}. `args` must be an object; its "op"/"id" are overwritten.
nlohmann::json make_request(std::string_view op, RequestId id,
                            nlohmann::json args = nlohmann::json::object());
// {"id": id, "ok": true, ...fields}
nlohmann::json make_ok_reply(RequestId id, nlohmann::json fields = nlohmann::json::object());
// {"id": id or null, "ok": false, "error": {"code": ..., "message": ...}}. The message may quote
// a peer's bytes, so it is made printable (ipc/printable.h) and cut at kMaxErrorMessageBytes:
// an error reply can always be encoded.
inline constexpr std::size_t kMaxErrorMessageBytes = 4096;
nlohmann::json make_error_reply(std::optional<RequestId> id, ErrorCode code,
                                std::string_view message);

// The envelope of a reply: its id (null for connection-level errors) and, if not ok, the error.
struct ReplyStatus {
  std::optional<RequestId> id;
  bool ok = false;
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
};
// Throws IpcError if `body` is not a well-formed reply. An error code this build does not know
// (a newer server) reads as kInternal with the code named in the message.
ReplyStatus parse_reply_status(const nlohmann::json& body);

// Field accessors that turn a missing or mistyped field into ProtocolError(kBadRequest) naming
// the field, so handlers can read arguments without checking every type by hand.
const std::string& string_field(const nlohmann::json& object, std::string_view key);
std::uint64_t uint_field(const nlohmann::json& object, std::string_view key);
std::optional<std::string> optional_string_field(const nlohmann::json& object,
                                                 std::string_view key);
// A JSON integer >= 0, whether it was parsed (unsigned) or built in C++ from an int (signed).
bool is_unsigned_integer(const nlohmann::json& value);

// hello: the client states its version and name. The server refuses another version with
// kVersionMismatch; the client checks the server's version in the reply the same way.
nlohmann::json make_hello_args(std::string_view client_name);
// Throws ProtocolError(kVersionMismatch) unless message["version"] == kProtocolVersion.
// `peer` names the other side in the message ("client" or "server").
void check_protocol_version(const nlohmann::json& message, std::string_view peer);

// import: {"model": NAME, "allocations": [ID, ...]} asks for one FD per allocation id (ids are
// the unsigned integers of the model's manifest); the reply {"allocations": [ID, ...]} carries
// the FDs in that order. At most kMaxFdsPerFrame ids per request: Client::import_allocations
// splits larger sets. The FDs are the client's to keep; the server counts a lease on the model
// until the client sends release or disconnects.
struct ImportRequest {
  std::string model;
  std::vector<std::uint64_t> allocations;
};
nlohmann::json make_import_args(std::string_view model, std::span<const std::uint64_t> allocations);
// Throws ProtocolError: kBadRequest for a malformed request, kTooLarge for too many ids.
ImportRequest parse_import_request(const Request& request);
nlohmann::json make_import_result(std::span<const std::uint64_t> allocations);

// kv_lease: {"chunk_bytes": B, "chunks": N, "min_chunks": M, "device": D} asks for N more KV
// chunks of B bytes (a multiple of 2 MiB, at most 1 GiB; one size per client) and states M, the
// chunks this worker needs for one full context on that device: the server keeps that many for
// it whatever others take. D (optional, 0 when absent, so older workers lease as before) is the
// server's KV device the chunks come from, each with its own budget: rank D's GPU of a
// tensor-parallel vmm server, rank D's share of a memfd one (issue 26); a server of one rank
// has device 0 only. The reply {"chunk_bytes": B, "device": D, "chunks": [ID, ...]} carries one
// FD per id, in order: as many as D's budget allows now, maybe none (the worker's requests then
// wait). At most kMaxFdsPerFrame. Chunk ids are unique across devices.
struct KvLeaseRequest {
  std::uint64_t chunk_bytes = 0;
  std::uint64_t chunks = 0;
  std::uint64_t min_chunks = 0;
  std::uint64_t device = 0;
};
// More KV devices than any host has GPUs: a larger index is refused before any lookup.
inline constexpr std::uint64_t kMaxKvDevices = 1024;
inline constexpr std::uint64_t kKvChunkAlignmentBytes = std::uint64_t(2) << 20;
inline constexpr std::uint64_t kMaxKvChunkBytesInProtocol = std::uint64_t(1) << 30;
inline constexpr std::uint64_t kMaxKvMinChunks = std::uint64_t(1) << 20;
nlohmann::json make_kv_lease_args(const KvLeaseRequest& request);
// Throws ProtocolError: kBadRequest for a malformed or out-of-range field, kTooLarge for more
// than kMaxFdsPerFrame chunks.
KvLeaseRequest parse_kv_lease_request(const Request& request);

// kv_return: {"chunks": [ID, ...]} gives chunks back (at most kMaxKvReturnIds, no repeats); the
// reply {"returned": N}. Ids the client does not hold are refused (kNotFound) and nothing is
// returned.
inline constexpr std::size_t kMaxKvReturnIds = 4096;
struct KvReturnRequest {
  std::vector<std::uint64_t> chunks;
};
nlohmann::json make_kv_return_args(std::span<const std::uint64_t> chunks);
KvReturnRequest parse_kv_return_request(const Request& request);

}  // namespace hearth::ipc
