#include "worker/tp/rank_channel.h"

#include <limits>
#include <stdexcept>

namespace hearth {

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what) {
  throw std::runtime_error("tensor-parallel channel: " + what);
}

const json& field(const json& m, const char* name) {
  const auto it = m.find(name);
  if (it == m.end()) bad(std::string("the message has no \"") + name + "\"");
  return *it;
}

int64_t integer(const json& m, const char* name, int64_t lo, int64_t hi) {
  const json& v = field(m, name);
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    bad(std::string("\"") + name + "\" must be an integer in [" + std::to_string(lo) + ", " +
        std::to_string(hi) + "], got " + v.dump().substr(0, 64));
  return v.get<int64_t>();
}

std::string text(const json& m, const char* name) {
  const json& v = field(m, name);
  if (!v.is_string()) bad(std::string("\"") + name + "\" must be a string");
  return v.get<std::string>();
}

bool flag(const json& m, const char* name) {
  const json& v = field(m, name);
  if (!v.is_boolean()) bad(std::string("\"") + name + "\" must be true or false");
  return v.get<bool>();
}

std::vector<int32_t> int32s(const json& m, const char* name) {
  const json& v = field(m, name);
  if (!v.is_array()) bad(std::string("\"") + name + "\" must be an array of integers");
  std::vector<int32_t> out;
  out.reserve(v.size());
  for (const json& x : v) {
    if (!x.is_number_integer() || x.get<int64_t>() < std::numeric_limits<int32_t>::min() ||
        x.get<int64_t>() > std::numeric_limits<int32_t>::max())
      bad(std::string("\"") + name + "\" must hold 32-bit integers only");
    out.push_back(int32_t(x.get<int64_t>()));
  }
  return out;
}

constexpr int kMaxInt = std::numeric_limits<int>::max();

}  // namespace

std::string message_type(const json& message) {
  if (!message.is_object()) bad("a message that is not a JSON object");
  const auto it = message.find("type");
  if (it == message.end() || !it->is_string())
    bad("a message without a \"type\": " + message.dump().substr(0, 120));
  return it->get<std::string>();
}

json hello_message(const TpHello& h) {
  json m = {{"type", "hello"},
            {"protocol", h.protocol},
            {"rank", h.rank},
            {"world_size", h.world_size},
            {"model_dir", h.model_dir},
            {"model_identity", h.model_identity},
            {"server_socket", h.server_socket},
            {"model_name", h.model_name},
            {"quantize_fp8", h.quantize_fp8},
            {"context_length", h.context_length},
            {"kv_block_size", h.kv_block_size},
            {"kv_blocks", h.kv_blocks},
            {"kv_cache_dtype", h.kv_cache_dtype},
            {"barrier_timeout_ms", h.barrier_timeout_ms},
            {"backend", h.backend}};
  if (h.backend == "cuda") {
    m["device"] = h.device;
    m["engine"] = h.engine;
    m["all_reduce"] = h.all_reduce;
  }
  m["kv_leased"] = h.kv_leased;
  m["kv_shared"] = h.kv_shared;
  return m;
}

TpHello parse_hello(const json& m) {
  if (const std::string type = message_type(m); type != "hello")
    bad("expected a hello, got a message of type \"" + type + "\"");
  TpHello h;
  const json& protocol = field(m, "protocol");
  if (!protocol.is_number_integer() || protocol.get<int64_t>() != kTpProtocolVersion)
    bad("the leader speaks protocol " + protocol.dump().substr(0, 32) + ", this follower " +
        std::to_string(kTpProtocolVersion));
  h.world_size = int(integer(m, "world_size", 2, 64));
  h.rank = int(integer(m, "rank", 1, h.world_size - 1));  // rank 0 is the leader
  h.model_dir = text(m, "model_dir");
  h.model_identity = text(m, "model_identity");
  h.server_socket = text(m, "server_socket");
  h.model_name = text(m, "model_name");
  if (h.model_dir.empty() == h.server_socket.empty() ||
      h.server_socket.empty() != h.model_name.empty())
    bad("the hello must name a model directory, or a server socket and a model name");
  h.quantize_fp8 = flag(m, "quantize_fp8");
  h.context_length = int(integer(m, "context_length", 1, kMaxInt));
  h.kv_block_size = int(integer(m, "kv_block_size", 1, kMaxInt));
  h.kv_blocks = int(integer(m, "kv_blocks", 1, 1 << 30));
  h.kv_cache_dtype = text(m, "kv_cache_dtype");
  h.barrier_timeout_ms = int(integer(m, "barrier_timeout_ms", 1, kMaxInt));
  h.backend = text(m, "backend");
  if (h.backend == "cuda") {
    h.device = int(integer(m, "device", 0, 63));
    h.engine = field(m, "engine");
    h.all_reduce = field(m, "all_reduce");
    if (!h.engine.is_object() || !h.all_reduce.is_object())
      bad("\"engine\" and \"all_reduce\" must be objects");
  } else if (h.backend != "cpu") {
    bad("\"backend\" must be \"cpu\" or \"cuda\", got \"" + h.backend.substr(0, 32) + "\"");
  }
  h.kv_leased = flag(m, "kv_leased");
  if (h.kv_leased && h.server_socket.empty())
    bad("only a served model's ranks lease their KV pools (\"kv_leased\" without a server)");
  h.kv_shared = flag(m, "kv_shared");
  if (h.kv_shared && !h.kv_leased) bad("only a leased pool shares (\"kv_shared\" unleased)");
  return h;
}

json ready_message(int rank, const json& all_reduce) {
  json m = {{"type", "ready"}, {"rank", rank}};
  if (!all_reduce.is_null()) m["all_reduce"] = all_reduce;
  return m;
}
json error_message(const std::string& error) {
  return {{"type", "error"}, {"message", error}};
}

void expect_ready(const json& m, int rank) {
  const std::string type = message_type(m);
  if (type == "error")
    throw std::runtime_error("tensor-parallel rank " + std::to_string(rank) +
                             " failed: " + text(m, "message"));
  if (type != "ready")
    bad("expected ready from rank " + std::to_string(rank) + ", got \"" + type + "\"");
  if (integer(m, "rank", 0, 63) != rank)
    bad("rank " + std::to_string(rank) + "'s channel answered as rank " + field(m, "rank").dump());
}

json forward_message(const ForwardBatch& batch) {
  json entries = json::array();
  for (const ForwardEntry& e : batch.entries)
    entries.push_back({{"tokens", e.tokens},
                       {"start_pos", e.start_pos},
                       {"block_table", e.block_table},
                       {"want_logits", e.want_logits}});
  return {{"type", "forward"}, {"entries", std::move(entries)}};
}

json stop_message() {
  return {{"type", "stop"}};
}

json peers_message(const std::vector<json>& shares) {
  return {{"type", "peers"}, {"all_reduce", shares}};
}

std::vector<json> parse_peers(const json& m) {
  if (const std::string type = message_type(m); type != "peers")
    bad("expected the peers' all-reduce shares, got \"" + type + "\"");
  const json& shares = field(m, "all_reduce");
  if (!shares.is_array() || shares.size() > 63) bad("\"all_reduce\" must be an array of shares");
  for (const json& s : shares)
    if (!s.is_object()) bad("an all-reduce share that is not an object");
  return shares.get<std::vector<json>>();
}

json kv_state_json(const TpKvState& s) {
  return {{"blocks", s.blocks},
          {"max_blocks", s.max_blocks},
          {"blocks_per_chunk", s.blocks_per_chunk},
          {"chunks", s.chunks},
          {"block_bytes", s.block_bytes},
          {"bytes", s.bytes},
          {"foreign_first", s.foreign_first},
          {"foreign_blocks", s.foreign_blocks}};
}

TpKvState parse_kv_state(const json& m) {
  if (!m.is_object()) bad("a KV pool's state that is not an object");
  TpKvState s;
  s.blocks = int(integer(m, "blocks", 0, 1 << 30));
  s.max_blocks = int(integer(m, "max_blocks", 0, 1 << 30));
  s.blocks_per_chunk = int(integer(m, "blocks_per_chunk", 1, 1 << 30));
  s.chunks = int(integer(m, "chunks", 0, 1 << 30));
  s.block_bytes = integer(m, "block_bytes", 1, std::numeric_limits<int64_t>::max());
  s.bytes = uint64_t(integer(m, "bytes", 0, std::numeric_limits<int64_t>::max()));
  if (s.blocks > s.max_blocks) bad("a KV pool holding more blocks than its most");
  s.foreign_first = int(integer(m, "foreign_first", 0, 1 << 30));
  s.foreign_blocks = int(integer(m, "foreign_blocks", 0, 1 << 30));
  if (s.foreign_blocks > 0 && s.foreign_first < s.max_blocks)
    bad("a KV pool whose foreign blocks overlap its own");
  return s;
}

json kv_resize_message(bool grow, int blocks) {
  return {{"type", grow ? "kv_grow" : "kv_shrink"}, {"blocks", blocks}};
}

int parse_kv_resize(const json& m) {
  const std::string type = message_type(m);
  if (type != "kv_grow" && type != "kv_shrink")
    bad("expected kv_grow or kv_shrink, got \"" + type + "\"");
  return int(integer(m, "blocks", 0, 1 << 30));
}

TpKvState kv_state_of(KvMemory& m) {
  TpKvState s{m.blocks(), m.max_blocks(),  m.blocks_per_chunk(),
              m.chunks(), m.block_bytes(), m.bytes()};
  if (const SharedKv* shared = m.shared()) {
    s.foreign_first = shared->first_foreign_block();
    s.foreign_blocks = shared->foreign_capacity();
  }
  return s;
}

json answer_kv_resize(KvMemory& memory, const json& message) {
  const int blocks = parse_kv_resize(message);
  if (message_type(message) == "kv_grow")
    memory.grow(blocks);
  else
    memory.shrink(blocks);
  json answer = kv_state_json(kv_state_of(memory));
  answer["type"] = "kv";
  return answer;
}

namespace {

json key_json(const BlockKey& k) {
  return json::array({k.low, k.high});
}

BlockKey key_of(const json& m, const char* name) {
  const json& v = field(m, name);
  if (!v.is_array() || v.size() != 2 || !v[0].is_number_unsigned() || !v[1].is_number_unsigned())
    bad(std::string("\"") + name + "\" must be a key: two unsigned 64-bit integers");
  return {v[0].get<uint64_t>(), v[1].get<uint64_t>()};
}

const json& array_of_objects(const json& m, const char* name) {
  const json& v = field(m, name);
  if (!v.is_array()) bad(std::string("\"") + name + "\" must be an array");
  for (const json& e : v)
    if (!e.is_object()) bad(std::string("an entry of \"") + name + "\" that is not an object");
  return v;
}

json kv_share(const char* op) {
  return {{"type", "kv_share"}, {"op", op}};
}

json kv_shared() {
  return {{"type", "kv_shared"}};
}

}  // namespace

json kv_share_domain_message(const BlockKey& domain) {
  json m = kv_share("domain");
  m["domain"] = key_json(domain);
  return m;
}

json kv_share_find_message(const BlockKey& root, std::span<const SharedKvLink> chain,
                           std::span<const int32_t> ids) {
  json links = json::array();
  for (const SharedKvLink& link : chain)
    links.push_back({{"key", key_json(link.key)},
                     {"tokens", std::vector<int32_t>(link.tokens.begin(), link.tokens.end())}});
  json m = kv_share(ids.empty() ? "find" : "find_at");
  m["root"] = key_json(root);
  m["links"] = std::move(links);
  if (!ids.empty()) m["ids"] = std::vector<int32_t>(ids.begin(), ids.end());
  return m;
}

json kv_share_release_message(std::span<const int32_t> ids) {
  json m = kv_share("release");
  m["ids"] = std::vector<int32_t>(ids.begin(), ids.end());
  return m;
}

json kv_share_publish_message(std::span<const SharedKvBlock> blocks) {
  json entries = json::array();
  for (const SharedKvBlock& b : blocks)
    entries.push_back({{"block", b.block},
                       {"key", key_json(b.key)},
                       {"parent", key_json(b.parent)},
                       {"tokens", std::vector<int32_t>(b.tokens.begin(), b.tokens.end())}});
  json m = kv_share("publish");
  m["blocks"] = std::move(entries);
  return m;
}

json kv_share_withdraw_message(std::span<const int32_t> ids) {
  json m = kv_share("withdraw");
  m["ids"] = std::vector<int32_t>(ids.begin(), ids.end());
  return m;
}

json answer_kv_share(SharedKv& shared, const json& m) {
  if (const std::string type = message_type(m); type != "kv_share")
    bad("expected a kv_share, got \"" + type + "\"");
  const std::string op = text(m, "op");
  json answer = kv_shared();
  if (op == "domain") {
    shared.set_domain(key_of(m, "domain"));
  } else if (op == "find" || op == "find_at") {
    const json& links = array_of_objects(m, "links");
    const std::vector<int32_t> ids = op == "find" ? std::vector<int32_t>{} : int32s(m, "ids");
    if (op == "find_at" && ids.size() != links.size()) bad("a find_at needs one id per link");
    std::vector<std::vector<int32_t>> tokens;
    tokens.reserve(links.size());
    std::vector<SharedKvLink> chain;
    chain.reserve(links.size());
    for (const json& link : links) {
      tokens.push_back(int32s(link, "tokens"));
      chain.push_back({key_of(link, "key"), tokens.back()});
    }
    answer["ids"] = op == "find" ? shared.find(key_of(m, "root"), chain)
                                 : shared.find_at(key_of(m, "root"), chain, ids);
  } else if (op == "release") {
    shared.release(int32s(m, "ids"));
  } else if (op == "publish") {
    const json& entries = array_of_objects(m, "blocks");
    std::vector<std::vector<int32_t>> tokens;
    tokens.reserve(entries.size());
    std::vector<SharedKvBlock> blocks;
    blocks.reserve(entries.size());
    for (const json& e : entries) {
      tokens.push_back(int32s(e, "tokens"));
      blocks.push_back({int32_t(integer(e, "block", 0, std::numeric_limits<int32_t>::max())),
                        key_of(e, "key"), key_of(e, "parent"), tokens.back()});
    }
    answer["count"] = shared.publish(blocks);
  } else if (op == "withdraw") {
    answer["ids"] = shared.withdraw(int32s(m, "ids"));
  } else {
    bad("\"op\" must be domain, find, find_at, release, publish or withdraw, got \"" +
        op.substr(0, 32) + "\"");
  }
  return answer;
}

json answer_kv_share(KvMemory* pool, const json& m) {
  SharedKv* shared = pool ? pool->shared() : nullptr;
  if (!shared) bad("a \"kv_share\" for a pool that does not share");
  return answer_kv_share(*shared, m);
}

std::vector<int32_t> parse_kv_shared_ids(const json& m) {
  if (const std::string type = message_type(m); type != "kv_shared")
    bad("expected kv_shared, got \"" + type + "\"");
  return int32s(m, "ids");
}

uint64_t parse_kv_shared_count(const json& m) {
  if (const std::string type = message_type(m); type != "kv_shared")
    bad("expected kv_shared, got \"" + type + "\"");
  return uint64_t(integer(m, "count", 0, std::numeric_limits<int64_t>::max()));
}

StepPlan parse_forward(const json& m) {
  if (const std::string type = message_type(m); type != "forward")
    bad("expected a forward, got \"" + type + "\"");
  const json& entries = field(m, "entries");
  if (!entries.is_array()) bad("\"entries\" must be an array");
  StepPlan plan;
  plan.tokens.reserve(entries.size());
  plan.tables.reserve(entries.size());
  for (const json& e : entries) {
    if (!e.is_object()) bad("an entry that is not an object");
    plan.tokens.push_back(int32s(e, "tokens"));
    plan.tables.push_back(int32s(e, "block_table"));
    ForwardEntry fe;
    fe.start_pos = int(integer(e, "start_pos", 0, kMaxInt));
    fe.want_logits = flag(e, "want_logits");
    plan.batch.entries.push_back(fe);
  }
  // The spans once the vectors stop moving.
  for (size_t i = 0; i < plan.batch.entries.size(); ++i) {
    plan.batch.entries[i].tokens = plan.tokens[i];
    plan.batch.entries[i].block_table = plan.tables[i];
  }
  return plan;
}

}  // namespace hearth
