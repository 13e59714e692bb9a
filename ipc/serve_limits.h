// The limits of a serving worker's protocol (hearth-worker --serve, worker/engine_server.h), in
// one place for the worker that enforces them and the gateway that must stay within them. The
// worker also states its request frame limit in its hello reply ("max_request_bytes"), computed
// by max_submit_bytes for its model, so a client need not recompute it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hearth::ipc {

// A request id ("id" of a submit's request): repeated in every event of the request.
inline constexpr std::size_t kMaxRequestIdBytes = 256;
// One events reply carries at most this many bytes of events (at least one event); the rest
// stay queued and the reply says "more": true.
inline constexpr std::size_t kMaxEventsReplyBytes = std::size_t{4} << 20;
// Undelivered events one client may have queued (as JSON text) before its requests are held
// (not scheduled, KV kept) until it reads: a slow reader slows only itself.
inline constexpr std::size_t kDefaultMaxQueuedEventBytes = std::size_t{4} << 20;
// Room in a submit frame for everything but the prompt's token ids: the envelope, the settings,
// stop strings and cache_salt.
inline constexpr std::size_t kSubmitOverheadBytes = std::size_t{1} << 20;

// The request frame limit of a worker whose model has `context_length` positions and
// `vocab_size` tokens: any prompt up to the context length, as "prompt_tokens" (each id written
// in decimal with a comma), fits beside kSubmitOverheadBytes of everything else.
constexpr std::size_t max_submit_bytes(std::int64_t context_length, std::int64_t vocab_size) {
  std::size_t digits = 1;
  for (std::int64_t largest = vocab_size > 1 ? vocab_size - 1 : 0; largest >= 10; largest /= 10)
    ++digits;
  const std::size_t positions = context_length > 0 ? std::size_t(context_length) : 0;
  return kSubmitOverheadBytes + positions * (digits + 1);
}

}  // namespace hearth::ipc
