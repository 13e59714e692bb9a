// hearth-kv-lookup-bench: where one shared-prefix lookup's time goes (issue 22). Against a
// running hearth-server (memfd or vmm), worker A leases chunks and publishes a chain of blocks;
// worker B looks the chain up as the engine does (SharedKvBlocks), first mapping A's chunks,
// then with them mapped, and drops its references. Besides the round trips it times each piece
// of a lookup on its own in this process: building the request, encoding it, the server's parse,
// the registry's walk, the reply's build and encode, the worker's parse of it. Prints one JSON
// object on stdout (medians in ms) and a short table on stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "ipc/client.h"
#include "ipc/frame.h"
#include "ipc/kv_share_protocol.h"
#include "ipc/main_guard.h"
#include "weight-server/daemon/kv_share_registry.h"
#include "weight-server/sharing/kv_chunk.h"
#include "worker/shared_kv_blocks.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace hearth;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs `f` `runs` times and returns the median time of one run in ms.
template <typename F>
double time_median(int runs, F&& f) {
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    const auto t = Clock::now();
    f();
    times.push_back(ms_since(t));
  }
  return median(std::move(times));
}

std::shared_ptr<ipc::Client> connect(const std::string& socket, const char* name) {
  ipc::ClientOptions options;
  options.name = name;
  options.timeout = std::chrono::minutes(1);
  return std::make_shared<ipc::Client>(ipc::Client::connect(socket, options));
}

// The reply the server builds for a lookup that found `hits` (no new chunks).
json lookup_reply_of(const std::vector<KvBlockPlace>& hits) {
  std::vector<ipc::WirePlace> places;
  for (const KvBlockPlace& place : hits) places.push_back({place.chunk, place.offset});
  return ipc::make_ok_reply(1, ipc::make_kv_lookup_reply(places, {}, {}));
}

std::vector<ipc::WirePlace> places_of_reply(const json& body, size_t asked) {
  return ipc::parse_kv_lookup_reply(body, 0, asked).places;
}

}  // namespace

int main(int argc, char** argv) {
  return hearth::run_main("hearth-kv-lookup-bench", [&] {
    CLI::App app{
        "Times one kv_lookup of a shared prefix against a running hearth-server, piece by "
        "piece (issue 22): JSON on stdout, a table on stderr."};
    std::string socket;
    int blocks = 125, block_tokens = 16, runs = 200, first_runs = 10;
    uint64_t block_bytes = 256 * 1024;
    app.add_option("--socket", socket, "the hearth-server's socket")->required();
    app.add_option("--blocks", blocks, "blocks in the shared prefix (125: 2,000 tokens)")
        ->check(CLI::Range(1, int(ipc::kMaxKvShareBlocks)));
    app.add_option("--block-tokens", block_tokens, "tokens per block")
        ->check(CLI::Range(1, int(ipc::kMaxKvShareBlockTokens)));
    app.add_option("--block-bytes", block_bytes, "bytes per block (chunks hold whole blocks)")
        ->check(CLI::Range(uint64_t(1), uint64_t(1) << 30));
    app.add_option("--runs", runs, "lookups with every chunk mapped already")
        ->check(CLI::Range(1, 100000));
    app.add_option("--first-runs", first_runs, "first lookups (each maps the chunks anew)")
        ->check(CLI::Range(1, 1000));
    CLI11_PARSE(app, argc, argv);

    const uint64_t chunk_bytes = kv_chunk_bytes_for(block_bytes);
    const uint64_t per_chunk = chunk_bytes / block_bytes;
    const uint64_t chunks = (uint64_t(blocks) + per_chunk - 1) / per_chunk;
    std::mt19937_64 rng(1);
    const ipc::WireKey domain{rng(), rng()}, root{rng(), rng()};

    // A leases and publishes the chain.
    auto a = connect(socket, "kv-lookup-bench-a");
    const ipc::Frame leased =
        a->call(ipc::op::kKvLease, ipc::make_kv_lease_args({chunk_bytes, chunks, 0}));
    const auto ids = leased.body.at("chunks").get<std::vector<uint64_t>>();
    if (ids.size() != chunks)
      throw std::runtime_error("the server leased " + std::to_string(ids.size()) + " of " +
                               std::to_string(chunks) + " chunks");
    ipc::KvPublishRequest publish{domain, block_bytes, {}};
    std::vector<ipc::KvLookupLink> chain;
    for (int i = 0; i < blocks; ++i) {
      std::vector<int32_t> tokens(static_cast<size_t>(block_tokens));
      for (int32_t& t : tokens) t = int32_t(rng() % 128256);
      const ipc::WireKey key{rng(), rng()};
      publish.blocks.push_back({{ids[size_t(i) / per_chunk], (i % per_chunk) * block_bytes},
                                key,
                                i == 0 ? root : chain.back().key,
                                tokens});
      chain.push_back({key, tokens});
    }
    json out;
    const double publish_first =
        time_median(1, [&] { a->call(ipc::op::kKvPublish, ipc::make_kv_publish_args(publish)); });
    // Again: every key is a duplicate now, so this is the message's cost with little registry
    // work.
    out["publish_ms"] = {{"first", publish_first}, {"repeat", time_median(runs, [&] {
                                                      a->call(ipc::op::kKvPublish,
                                                              ipc::make_kv_publish_args(publish));
                                                    })}};

    // B: first lookups (a fresh SharedKvBlocks maps every chunk), then lookups with all mapped.
    auto b = connect(socket, "kv-lookup-bench-b");
    std::vector<double> first, first_unref;
    for (int i = 0; i < first_runs; ++i) {
      SharedKvBlocks shared(b, domain, int64_t(block_bytes), int(chunks));
      auto t = Clock::now();
      const auto found = shared.lookup(root, chain);
      first.push_back(ms_since(t));
      if (found.size() != size_t(blocks))
        throw std::runtime_error("found " + std::to_string(found.size()) + " blocks");
      std::vector<ipc::WirePlace> places;
      for (const auto& f : found) places.push_back(f.place);
      t = Clock::now();
      shared.unref(places);
      first_unref.push_back(ms_since(t));
    }
    SharedKvBlocks shared(b, domain, int64_t(block_bytes), int(chunks));
    std::vector<ipc::WirePlace> places;
    for (const auto& f : shared.lookup(root, chain)) places.push_back(f.place);
    shared.unref(places);
    std::vector<double> mapped, unref;
    for (int i = 0; i < runs; ++i) {
      auto t = Clock::now();
      const auto found = shared.lookup(root, chain);
      mapped.push_back(ms_since(t));
      t = Clock::now();
      shared.unref(places);
      unref.push_back(ms_since(t));
    }
    out["lookup_ms"] = {{"first_mapping_chunks", median(first)},
                        {"chunks_mapped", median(mapped)},
                        {"unref", median(unref)},
                        {"chunks", chunks}};

    // The pieces, one at a time, in this process.
    ipc::KvLookupRequest request{domain, block_bytes, root, chain, {}};
    request.mapped = ids;
    json args;
    std::string frame;
    ipc::Request parsed_envelope;
    ipc::KvLookupRequest parsed;
    json pieces;
    pieces["build_request"] = time_median(runs, [&] { args = ipc::make_kv_lookup_args(request); });
    pieces["encode_request"] = time_median(
        runs, [&] { frame = ipc::encode_frame(ipc::make_request(ipc::op::kKvLookup, 1, args)); });
    pieces["request_bytes"] = frame.size();
    pieces["server_decode"] = time_median(runs, [&] {
      parsed_envelope = ipc::parse_request(json::parse(frame.substr(ipc::kFrameHeaderBytes)));
    });
    pieces["server_parse_fields"] =
        time_median(runs, [&] { parsed = ipc::parse_kv_lookup_request(parsed_envelope); });
    KvShareRegistry registry;
    for (uint64_t id : ids) registry.add_chunk(1, id, chunk_bytes);
    for (const auto& block : publish.blocks)
      registry.publish(1, {block.place.chunk, block.place.offset},
                       {{domain.low, domain.high},
                        block_bytes,
                        {block.key.low, block.key.high},
                        {block.parent.low, block.parent.high},
                        block.tokens});
    std::vector<KvBlockPlace> hits;
    pieces["registry_lookup"] = time_median(runs, [&] {
      std::vector<KvShareLink> links;
      for (const auto& link : parsed.chain)
        links.push_back({{link.key.low, link.key.high}, link.tokens});
      hits =
          registry.lookup(2, {domain.low, domain.high}, block_bytes, {root.low, root.high}, links);
      registry.unref(2, hits);
    });
    std::string reply;
    pieces["build_encode_reply"] =
        time_median(runs, [&] { reply = ipc::encode_frame(lookup_reply_of(hits)); });
    pieces["reply_bytes"] = reply.size();
    pieces["worker_decode_reply"] = time_median(runs, [&] {
      const auto places =
          places_of_reply(json::parse(reply.substr(ipc::kFrameHeaderBytes)), chain.size());
      if (places.size() != hits.size()) throw std::runtime_error("reply lost places");
    });
    out["pieces_ms"] = pieces;
    std::printf("%s\n", out.dump(2).c_str());
    std::fprintf(stderr,
                 "lookup of %d blocks x %d tokens: first %.3f ms, mapped %.3f ms, unref %.3f ms\n",
                 blocks, block_tokens, median(first), median(mapped), median(unref));
    return 0;
  });
}
