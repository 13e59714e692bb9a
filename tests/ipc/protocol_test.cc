#include "ipc/protocol.h"

#include <gtest/gtest.h>

#include "ipc/fd_passing.h"

namespace hearth::ipc {
namespace {

using nlohmann::json;

ErrorCode code_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ProtocolError& e) {
    return e.code();
  }
  ADD_FAILURE() << "expected a ProtocolError";
  return ErrorCode::kInternal;
}

TEST(Protocol, ErrorCodesRoundTripThroughTheirNames) {
  const ErrorCode all[] = {ErrorCode::kBadRequest, ErrorCode::kUnknownOp,
                           ErrorCode::kTooLarge,   ErrorCode::kUnauthorized,
                           ErrorCode::kNotFound,   ErrorCode::kBusy,
                           ErrorCode::kInternal,   ErrorCode::kVersionMismatch,
                           ErrorCode::kTimeout,    ErrorCode::kShuttingDown};
  for (ErrorCode code : all) EXPECT_EQ(parse_error_code(to_string(code)), code);
  EXPECT_EQ(to_string(ErrorCode::kBadRequest), "bad_request");
  EXPECT_EQ(to_string(ErrorCode::kVersionMismatch), "version_mismatch");
  EXPECT_FALSE(parse_error_code("no_such_code"));
}

TEST(Protocol, KnowsItsOpsAndWhichAreAdmin) {
  for (auto name : {"hello", "list", "manifest", "import", "release", "stats", "load", "unload",
                    "shutdown", "kv_lease", "kv_return"}) {
    EXPECT_TRUE(is_known_op(name)) << name;
  }
  EXPECT_FALSE(is_known_op("frobnicate"));
  EXPECT_TRUE(is_admin_op("load"));
  EXPECT_TRUE(is_admin_op("unload"));
  EXPECT_TRUE(is_admin_op("shutdown"));
  EXPECT_FALSE(is_admin_op("kv_lease"));  // every allowed worker leases KV
  EXPECT_FALSE(is_admin_op("import"));
  EXPECT_FALSE(is_admin_op("stats"));
}

TEST(Protocol, BuildsAndParsesRequests) {
  const json body = make_request(op::kManifest, 42, {{"model", "tiny"}});
  EXPECT_EQ(body, json({{"op", "manifest"}, {"id", 42}, {"model", "tiny"}}));
  const Request request = parse_request(body);
  EXPECT_EQ(request.op, "manifest");
  EXPECT_EQ(request.id, 42u);
  EXPECT_EQ(string_field(request.body, "model"), "tiny");
}

TEST(Protocol, RefusesMalformedRequestEnvelopes) {
  const json bad[] = {
      json::array(),
      {{"id", 1}},
      {{"op", 5}, {"id", 1}},
      {{"op", "list"}},
      {{"op", "list"}, {"id", -1}},
      {{"op", "list"}, {"id", 1.5}},
      {{"op", "list"}, {"id", "1"}},
  };
  for (const json& body : bad) {
    EXPECT_EQ(code_of([&] { parse_request(body); }), ErrorCode::kBadRequest) << body;
  }
  try {
    parse_request({{"id", 1}});
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.message(), "field 'op' must be a string");
    EXPECT_EQ(std::string(e.what()), "bad_request: field 'op' must be a string");
  }
}

TEST(Protocol, FindsTheIdOfAMalformedRequestWhenItCan) {
  EXPECT_EQ(request_id_of({{"id", 9}}), 9u);
  EXPECT_FALSE(request_id_of({{"id", "9"}}));
  EXPECT_FALSE(request_id_of(json::array()));
}

TEST(Protocol, BuildsAndParsesReplies) {
  const json ok = make_ok_reply(3, {{"models", {"a"}}});
  EXPECT_EQ(ok, json({{"id", 3}, {"ok", true}, {"models", {"a"}}}));
  const ReplyStatus ok_status = parse_reply_status(ok);
  EXPECT_TRUE(ok_status.ok);
  EXPECT_EQ(ok_status.id, 3u);

  const json err = make_error_reply(4, ErrorCode::kNotFound, "no model 'x'");
  EXPECT_EQ(err, json({{"id", 4},
                       {"ok", false},
                       {"error", {{"code", "not_found"}, {"message", "no model 'x'"}}}}));
  const ReplyStatus err_status = parse_reply_status(err);
  EXPECT_FALSE(err_status.ok);
  EXPECT_EQ(err_status.code, ErrorCode::kNotFound);
  EXPECT_EQ(err_status.message, "no model 'x'");

  const json connection_level = make_error_reply(std::nullopt, ErrorCode::kBusy, "full");
  EXPECT_TRUE(connection_level["id"].is_null());
  EXPECT_FALSE(parse_reply_status(connection_level).id);
}

TEST(Protocol, RefusesMalformedReplies) {
  EXPECT_THROW(parse_reply_status({{"ok", true}}), IpcError);
  EXPECT_THROW(parse_reply_status({{"id", 1}, {"ok", "yes"}}), IpcError);
  EXPECT_THROW(parse_reply_status({{"id", 1}, {"ok", false}}), IpcError);
  EXPECT_THROW(parse_reply_status({{"id", 1}, {"ok", false}, {"error", {{"code", "busy"}}}}),
               IpcError);
}

TEST(Protocol, ReadsAnUnknownErrorCodeAsInternalAndKeepsItsName) {
  const ReplyStatus status = parse_reply_status(
      {{"id", 1}, {"ok", false}, {"error", {{"code", "from_the_future"}, {"message", "m"}}}});
  EXPECT_EQ(status.code, ErrorCode::kInternal);
  EXPECT_NE(status.message.find("from_the_future"), std::string::npos);
}

TEST(Protocol, ChecksTheProtocolVersion) {
  EXPECT_NO_THROW(check_protocol_version(make_hello_args("w"), "client"));
  EXPECT_EQ(code_of([] {
              check_protocol_version({{"version", kProtocolVersion + 1}}, "client");
            }),
            ErrorCode::kVersionMismatch);
  EXPECT_EQ(code_of([] { check_protocol_version(json::object(), "server"); }),
            ErrorCode::kVersionMismatch);
}

// Issue 21: a version of the wrong type or out of range read as "did not state a protocol
// version". Each is now named as what it is, beside the version this build speaks.
TEST(Protocol, AWrongVersionSaysWhatIsWrongWithIt) {
  const auto message_of = [](const std::string& hello) {
    try {
      check_protocol_version(json::parse(hello), "client");
    } catch (const ProtocolError& e) {
      EXPECT_EQ(e.code(), ErrorCode::kVersionMismatch) << hello;
      return std::string(e.message());
    }
    ADD_FAILURE() << "accepted " << hello;
    return std::string();
  };
  const std::pair<std::string, std::vector<std::string>> cases[] = {
      {R"({"version": "1"})", {"must be an integer", "got string \"1\""}},
      {R"({"version": 1.0})", {"must be an integer", "got 1.0"}},
      {R"({"version": 18446744073709551617})", {"out of range"}},
      {R"({"version": -1})", {"speaks protocol version -1"}},
      {R"({"version": 18446744073709551615})", {"speaks protocol version 18446744073709551615"}},
      {R"({"version": [1]})", {"must be an integer", "got array"}},
      {R"({})", {"did not state a protocol version"}},
  };
  for (const auto& [hello, fragments] : cases) {
    const std::string message = message_of(hello);
    for (const std::string& f : fragments)
      EXPECT_NE(message.find(f), std::string::npos) << hello << ": " << message;
    EXPECT_NE(
        message.find("this build speaks protocol version " + std::to_string(kProtocolVersion)),
        std::string::npos)
        << message;
    EXPECT_EQ(message.find("did not state"), hello == "{}" ? 11u : std::string::npos) << message;
  }
}

TEST(Protocol, FieldAccessorsNameTheBadField) {
  const json body = {{"s", "text"}, {"n", 5}, {"neg", -5}};
  EXPECT_EQ(string_field(body, "s"), "text");
  EXPECT_EQ(uint_field(body, "n"), 5u);
  EXPECT_EQ(optional_string_field(body, "s"), "text");
  EXPECT_FALSE(optional_string_field(body, "missing"));
  EXPECT_EQ(code_of([&] { string_field(body, "n"); }), ErrorCode::kBadRequest);
  EXPECT_EQ(code_of([&] { uint_field(body, "neg"); }), ErrorCode::kBadRequest);
  EXPECT_EQ(code_of([&] { optional_string_field(body, "n"); }), ErrorCode::kBadRequest);
}

TEST(Protocol, ImportRequestsRoundTripAndAreCapped) {
  const std::vector<std::uint64_t> ids = {3, 1, 4};
  const Request request = parse_request(make_request(op::kImport, 1, make_import_args("m", ids)));
  const ImportRequest parsed = parse_import_request(request);
  EXPECT_EQ(parsed.model, "m");
  EXPECT_EQ(parsed.allocations, ids);
  EXPECT_EQ(make_import_result(ids)["allocations"], json(ids));

  const std::vector<std::uint64_t> too_many(kMaxFdsPerFrame + 1, 0);
  const Request big = parse_request(make_request(op::kImport, 2, make_import_args("m", too_many)));
  EXPECT_EQ(code_of([&] { parse_import_request(big); }), ErrorCode::kTooLarge);

  const Request mistyped =
      parse_request(make_request(op::kImport, 3, {{"model", "m"}, {"allocations", {"a"}}}));
  EXPECT_EQ(code_of([&] { parse_import_request(mistyped); }), ErrorCode::kBadRequest);
}

// Issue 26: a lease names its device; device 0 is left out, so the message stays what a server
// of one device has always read, and a message without one means device 0.
TEST(Protocol, KvLeaseRequestsNameTheirDeviceWhenItIsNotZero) {
  const json zero = make_kv_lease_args({std::uint64_t(2) << 20, 3, 1, 0});
  EXPECT_FALSE(zero.contains("device")) << zero.dump();
  EXPECT_EQ(parse_kv_lease_request(parse_request(make_request(op::kKvLease, 1, zero))).device, 0u);

  const json one = make_kv_lease_args({std::uint64_t(2) << 20, 3, 1, 1});
  EXPECT_EQ(one["device"], 1);
  const KvLeaseRequest parsed =
      parse_kv_lease_request(parse_request(make_request(op::kKvLease, 2, one)));
  EXPECT_EQ(parsed.device, 1u);
  EXPECT_EQ(parsed.chunks, 3u);
  EXPECT_EQ(parsed.min_chunks, 1u);

  json far = one;
  far["device"] = kMaxKvDevices;
  EXPECT_EQ(
      code_of([&] { parse_kv_lease_request(parse_request(make_request(op::kKvLease, 3, far))); }),
      ErrorCode::kBadRequest);
  far["device"] = nullptr;
  EXPECT_EQ(
      code_of([&] { parse_kv_lease_request(parse_request(make_request(op::kKvLease, 4, far))); }),
      ErrorCode::kBadRequest);
}

}  // namespace
}  // namespace hearth::ipc
