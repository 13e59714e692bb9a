#include "worker/serve_protocol.h"

#include <initializer_list>

#include "ipc/errors.h"
#include "ipc/printable.h"
#include "ipc/serve_limits.h"
#include "worker/request_file.h"

namespace hearth {

namespace {

using json = nlohmann::json;

[[noreturn]] void bad_request(const std::string& message) {
  throw ipc::ProtocolError(ipc::ErrorCode::kBadRequest, message);
}

// Every field but the envelope's ("op", "id") must be one of `allowed`.
void check_fields(const json& body, std::string_view op,
                  std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : body.items()) {
    if (key == "op" || key == "id") continue;
    bool known = false;
    for (std::string_view a : allowed) known |= key == a;
    if (known) continue;
    std::string expected;
    for (std::string_view a : allowed) expected += (expected.empty() ? "" : ", ") + std::string(a);
    bad_request(std::string(op) + ": unknown field '" + ipc::printable(key, 64) + "' (" +
                (expected.empty() ? "it takes no arguments" : "it takes " + expected) + ")");
  }
}

}  // namespace

const json& submit_request_object(const json& body) {
  check_fields(body, "submit", {"request"});
  const auto it = body.find("request");
  if (it == body.end()) bad_request("submit needs a \"request\"");
  if (!it->is_object()) bad_request("submit: \"request\" must be a JSON object");
  return *it;
}

std::string cancel_request_id(const json& body) {
  check_fields(body, "cancel", {"request_id"});
  const auto it = body.find("request_id");
  if (it == body.end()) bad_request("cancel needs a \"request_id\"");
  if (!it->is_string() || it->get_ref<const std::string&>().empty())
    bad_request("cancel: \"request_id\" must be a non-empty string");
  const std::string& id = it->get_ref<const std::string&>();
  if (id.size() > ipc::kMaxRequestIdBytes)
    bad_request("cancel: \"request_id\" is " + std::to_string(id.size()) + " bytes (at most " +
                std::to_string(ipc::kMaxRequestIdBytes) + ")");
  return id;
}

void check_no_arguments(const json& body, std::string_view op) {
  check_fields(body, op, {});
}

Request submit_request(json request, const RequestSettings& defaults, const Tokenizer* tokenizer) {
  try {
    return request_from_json(std::move(request), defaults, tokenizer, "submit");
  } catch (const std::runtime_error& e) {
    bad_request(e.what());
  }
}

nlohmann::json stats_json(const EngineStats& s) {
  nlohmann::json out = {{"running", s.running},
                        {"waiting", s.waiting},
                        {"kv_blocks_used", s.kv_blocks_used},
                        {"kv_blocks_total", s.kv_blocks_total},
                        {"kv_block_size", s.kv_block_size},
                        {"steps", s.steps},
                        {"last_step_sequences", s.last_step_sequences},
                        {"last_step_tokens", s.last_step_tokens},
                        {"forwarded_tokens", s.forwarded_tokens},
                        {"generated_tokens", s.generated_tokens},
                        {"preemptions", s.preemptions},
                        {"finished", s.finished},
                        {"aborted", s.cancelled},
                        {"held", s.held},
                        {"prefix_cache_queries", s.prefix_cache_queries},
                        {"prefix_cache_hits", s.prefix_cache_hits},
                        {"prefix_cache_blocks", s.prefix_cache_blocks},
                        {"prefix_cache_evicted_blocks", s.prefix_cache_evicted_blocks},
                        {"kv_share", s.kv_share},
                        {"kv_share_hit_blocks", s.kv_share_hit_blocks},
                        {"kv_share_hit_tokens", s.kv_share_hit_tokens},
                        {"kv_share_published_blocks", s.kv_share_published_blocks},
                        {"kv_share_lookups", s.kv_share_lookups}};
  if (s.kv_lease)
    out["kv_lease"] = {{"chunks", s.kv_lease_chunks},
                       {"bytes", s.kv_lease_bytes},
                       {"blocks", s.kv_blocks_total},
                       {"grows", s.kv_lease_grows},
                       {"asked_blocks", s.kv_lease_asked_blocks},
                       {"shrinks", s.kv_lease_shrinks}};
  return out;
}

nlohmann::json stats_json(const EngineStats& s, const IterationTokens& it) {
  json j = stats_json(s);
  j["iteration_tokens"] = {{"counts", it.counts}, {"sum", it.sum}};
  return j;
}

}  // namespace hearth
