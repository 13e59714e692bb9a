// What a CPU engine rank needs from the other ranks of its tensor-parallel group when each rank
// lives in a process of its own (issue 26; the exchange itself is worker/tp/shared_exchange.h).
// The engine only sees this interface, so it stays free of sockets and processes.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>

#include "worker/engine/backend.h"

namespace hearth {

class RankCollective {
 public:
  virtual ~RankCollective() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // The leader sends `batch` (its step plan) to every follower before it computes it; a
  // follower, which received the plan, does nothing. Throws std::runtime_error once a rank died.
  virtual void begin_forward(const ForwardBatch& batch) = 0;
  // Why the group can run no more forwards (a rank died or did not come), "" while it can.
  virtual std::string failure() const { return {}; }
  // The same, after looking whether a rank died since the last forward.
  virtual std::string probe_failure() { return failure(); }

  // Floats one exchange carries per rank (at least 1).
  virtual size_t exchange_capacity() const = 0;
  // One round: this rank offers `mine` (at most exchange_capacity() floats), every rank waits
  // for every other, then `use` reads every rank's offer, in rank order, until the call returns.
  // Throws std::runtime_error naming the rank that died or did not come in time.
  virtual void exchange(
      std::span<const float> mine,
      const std::function<void(std::span<const std::span<const float>>)>& use) = 0;

  // `data` (this rank's partial, `count` floats, the same count on every rank) becomes
  // ((p0 + p1) + p2) + ... in rank order on every rank: each add rounded in fp32, so the bits of
  // the in-process CPU ranks' sum. Chunked by exchange_capacity(), which moves no bit.
  void all_reduce(float* data, size_t count);

  // Every rank offers `rows` rows of its own `cols` floats (at most `max_cols`, the same on
  // every rank); `take(rank, first_row, n, data)` is called for each rank's rows
  // [first_row, first_row + n), data holding n x that rank's cols floats row after row.
  void all_gather_rows(
      const float* mine, int rows, int cols, int max_cols,
      const std::function<void(int rank, int first_row, int n, const float* data)>& take);
};

}  // namespace hearth
