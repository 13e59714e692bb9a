#include "ipc/protocol.h"

#include "ipc/printable.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "ipc/fd_passing.h"
#include "ipc/kv_share_protocol.h"
#include "base/json_limits.h"

namespace hearth::ipc {
namespace {

constexpr std::array<std::string_view, 18> kKnownOps = {
    op::kHello,   op::kList,     op::kManifest,  op::kImport,   op::kRelease, op::kStats,
    op::kLoad,    op::kUnload,   op::kShutdown,  op::kSubmit,   op::kCancel,  op::kEvents,
    op::kKvLease, op::kKvReturn, op::kKvPublish, op::kKvLookup, op::kKvUnref, op::kKvWithdraw,
};
constexpr std::array<std::string_view, 3> kAdminOps = {op::kLoad, op::kUnload, op::kShutdown};

const nlohmann::json* find(const nlohmann::json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

[[noreturn]] void bad_field(std::string_view key, std::string_view expected) {
  throw ProtocolError(ErrorCode::kBadRequest,
                      "field '" + std::string(key) + "' must be " + std::string(expected));
}

}  // namespace

bool is_unsigned_integer(const nlohmann::json& value) {
  // Parsed non-negative numbers are unsigned, but a json built in C++ from an int is signed.
  return value.is_number_unsigned() ||
         (value.is_number_integer() && value.get<std::int64_t>() >= 0);
}

bool is_known_op(std::string_view name) {
  return std::find(kKnownOps.begin(), kKnownOps.end(), name) != kKnownOps.end();
}

bool is_admin_op(std::string_view name) {
  return std::find(kAdminOps.begin(), kAdminOps.end(), name) != kAdminOps.end();
}

Request parse_request(nlohmann::json body) {
  if (!body.is_object()) throw ProtocolError(ErrorCode::kBadRequest, "a request must be an object");
  Request request;
  request.op = string_field(body, "op");
  request.id = uint_field(body, "id");
  request.body = std::move(body);
  return request;
}

std::optional<RequestId> request_id_of(const nlohmann::json& body) {
  const nlohmann::json* id = find(body, "id");
  if (id == nullptr || !is_unsigned_integer(*id)) return std::nullopt;
  return id->get<RequestId>();
}

nlohmann::json make_request(std::string_view op, RequestId id, nlohmann::json args) {
  if (!args.is_object()) throw IpcError("request arguments must be a JSON object");
  args["op"] = op;
  args["id"] = id;
  return args;
}

nlohmann::json make_ok_reply(RequestId id, nlohmann::json fields) {
  if (!fields.is_object()) throw IpcError("reply fields must be a JSON object");
  fields["id"] = id;
  fields["ok"] = true;
  return fields;
}

nlohmann::json make_error_reply(std::optional<RequestId> id, ErrorCode code,
                                std::string_view message) {
  nlohmann::json reply = nlohmann::json::object();
  reply["id"] = id ? nlohmann::json(*id) : nlohmann::json(nullptr);
  reply["ok"] = false;
  reply["error"] = {{"code", to_string(code)},
                    {"message", printable(message, kMaxErrorMessageBytes)}};
  return reply;
}

ReplyStatus parse_reply_status(const nlohmann::json& body) {
  ReplyStatus status;
  const nlohmann::json* id = find(body, "id");
  const nlohmann::json* ok = find(body, "ok");
  if (id == nullptr || !(id->is_null() || is_unsigned_integer(*id)) || ok == nullptr ||
      !ok->is_boolean()) {
    throw IpcError("malformed reply (needs an integer or null 'id' and a boolean 'ok'): " +
                   body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  if (!id->is_null()) status.id = id->get<RequestId>();
  status.ok = ok->get<bool>();
  if (status.ok) return status;
  const nlohmann::json* error = find(body, "error");
  const nlohmann::json* code = error ? find(*error, "code") : nullptr;
  const nlohmann::json* message = error ? find(*error, "message") : nullptr;
  if (code == nullptr || !code->is_string() || message == nullptr || !message->is_string()) {
    throw IpcError("malformed error reply (needs error.code and error.message)");
  }
  status.message = message->get<std::string>();
  if (auto known = parse_error_code(code->get<std::string>())) {
    status.code = *known;
  } else {
    status.code = ErrorCode::kInternal;
    status.message = "[" + code->get<std::string>() + "] " + status.message;
  }
  return status;
}

const std::string& string_field(const nlohmann::json& object, std::string_view key) {
  const nlohmann::json* value = find(object, key);
  if (value == nullptr || !value->is_string()) bad_field(key, "a string");
  return value->get_ref<const std::string&>();
}

std::uint64_t uint_field(const nlohmann::json& object, std::string_view key) {
  const nlohmann::json* value = find(object, key);
  if (value == nullptr || !is_unsigned_integer(*value)) bad_field(key, "an unsigned integer");
  return value->get<std::uint64_t>();
}

std::optional<std::string> optional_string_field(const nlohmann::json& object,
                                                 std::string_view key) {
  const nlohmann::json* value = find(object, key);
  if (value == nullptr || value->is_null()) return std::nullopt;
  if (!value->is_string()) bad_field(key, "a string");
  return value->get<std::string>();
}

nlohmann::json make_hello_args(std::string_view client_name) {
  return {{"version", kProtocolVersion}, {"client", client_name}};
}

void check_protocol_version(const nlohmann::json& message, std::string_view peer) {
  const std::string supported =
      " (this build speaks protocol version " + std::to_string(kProtocolVersion) + ")";
  const auto refuse = [&](const std::string& why) {
    throw ProtocolError(ErrorCode::kVersionMismatch, "the " + std::string(peer) + why + supported);
  };
  const nlohmann::json* version = find(message, "version");
  if (version == nullptr || version->is_null()) refuse(" did not state a protocol version");
  // Each wrong kind of value said as what it is: "1", 1.0 and 2^64+1 (which JSON parsers read
  // as a float) are not versions this build could speak.
  if (version->is_number_float()) {
    const double v = version->get<double>();
    if (v == std::floor(v) && std::fabs(v) >= 9223372036854775808.0)
      refuse("'s protocol version " + json_excerpt(*version) + " is out of range");
    refuse("'s protocol version must be an integer, got " + json_excerpt(*version));
  }
  if (!version->is_number_integer()) {
    refuse("'s protocol version must be an integer, got " + std::string(version->type_name()) +
           " " + json_excerpt(*version));
  }
  if (version->is_number_unsigned() ? version->get<std::uint64_t>() != kProtocolVersion
                                    : version->get<std::int64_t>() != kProtocolVersion) {
    refuse(" speaks protocol version " + version->dump());
  }
}

nlohmann::json make_import_args(std::string_view model,
                                std::span<const std::uint64_t> allocations) {
  return {{"model", model},
          {"allocations", std::vector<std::uint64_t>(allocations.begin(), allocations.end())}};
}

ImportRequest parse_import_request(const Request& request) {
  ImportRequest parsed;
  parsed.model = string_field(request.body, "model");
  const nlohmann::json* ids = find(request.body, "allocations");
  if (ids == nullptr || !ids->is_array()) bad_field("allocations", "an array of allocation ids");
  if (ids->size() > kMaxFdsPerFrame) {
    throw ProtocolError(ErrorCode::kTooLarge, "import of " + std::to_string(ids->size()) +
                                                  " allocations in one request (at most " +
                                                  std::to_string(kMaxFdsPerFrame) +
                                                  "; send batches)");
  }
  parsed.allocations.reserve(ids->size());
  for (const nlohmann::json& id : *ids) {
    if (!is_unsigned_integer(id)) bad_field("allocations", "an array of unsigned integers");
    parsed.allocations.push_back(id.get<std::uint64_t>());
  }
  return parsed;
}

nlohmann::json make_import_result(std::span<const std::uint64_t> allocations) {
  return {{"allocations", std::vector<std::uint64_t>(allocations.begin(), allocations.end())}};
}

nlohmann::json make_kv_lease_args(const KvLeaseRequest& request) {
  nlohmann::json args = {{"chunk_bytes", request.chunk_bytes},
                         {"chunks", request.chunks},
                         {"min_chunks", request.min_chunks}};
  // Device 0 is the default: its requests stay what a server of one device has always read.
  if (request.device != 0) args["device"] = request.device;
  return args;
}

KvLeaseRequest parse_kv_lease_request(const Request& request) {
  KvLeaseRequest parsed;
  parsed.chunk_bytes = uint_field(request.body, "chunk_bytes");
  parsed.chunks = uint_field(request.body, "chunks");
  parsed.min_chunks = uint_field(request.body, "min_chunks");
  if (parsed.chunk_bytes == 0 || parsed.chunk_bytes % kKvChunkAlignmentBytes != 0 ||
      parsed.chunk_bytes > kMaxKvChunkBytesInProtocol)
    throw ProtocolError(ErrorCode::kBadRequest,
                        "chunk_bytes " + std::to_string(parsed.chunk_bytes) +
                            " must be a positive multiple of 2 MiB of at most 1 GiB");
  if (parsed.chunks == 0) bad_field("chunks", "at least 1");
  if (parsed.chunks > kMaxFdsPerFrame)
    throw ProtocolError(ErrorCode::kTooLarge, "a lease of " + std::to_string(parsed.chunks) +
                                                  " chunks in one request (at most " +
                                                  std::to_string(kMaxFdsPerFrame) + ")");
  if (parsed.min_chunks > kMaxKvMinChunks)
    bad_field("min_chunks", "at most " + std::to_string(kMaxKvMinChunks));
  if (find(request.body, "device") != nullptr) {
    parsed.device = uint_field(request.body, "device");
    if (parsed.device >= kMaxKvDevices)
      bad_field("device", "a KV device index below " + std::to_string(kMaxKvDevices));
  }
  return parsed;
}

nlohmann::json make_kv_return_args(std::span<const std::uint64_t> chunks) {
  return {{"chunks", std::vector<std::uint64_t>(chunks.begin(), chunks.end())}};
}

KvReturnRequest parse_kv_return_request(const Request& request) {
  const nlohmann::json* ids = find(request.body, "chunks");
  if (ids == nullptr || !ids->is_array()) bad_field("chunks", "an array of chunk ids");
  if (ids->empty()) bad_field("chunks", "a non-empty array of chunk ids");
  if (ids->size() > kMaxKvReturnIds)
    throw ProtocolError(ErrorCode::kTooLarge, "a return of " + std::to_string(ids->size()) +
                                                  " chunks in one request (at most " +
                                                  std::to_string(kMaxKvReturnIds) + ")");
  KvReturnRequest parsed;
  parsed.chunks.reserve(ids->size());
  for (const nlohmann::json& id : *ids) {
    if (!is_unsigned_integer(id)) bad_field("chunks", "an array of unsigned integers");
    parsed.chunks.push_back(id.get<std::uint64_t>());
  }
  std::vector<std::uint64_t> sorted = parsed.chunks;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    bad_field("chunks", "an array without repeated ids");
  return parsed;
}

}  // namespace hearth::ipc
