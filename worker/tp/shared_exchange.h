// The exchange between the processes of a tensor-parallel group (issue 26): one memfd, mapped by
// every rank, holding a header and one slot of floats per rank (twice: rounds alternate between
// two sets, so one barrier a round suffices). A round: each rank copies its offer into its slot,
// announces it (its round count in the header, then a futex wake), waits until every rank has
// announced the round, and reads every slot in rank order. A rank writes round e's slots only
// after every rank announced e-1, which each did after reading e-2, the last round of the same
// set. The wait has a deadline and, between futex sleeps, asks `peer_check` whether a peer died,
// so a dead or stuck rank is an error that names it, never a hang.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "base/unique_fd.h"

namespace hearth {

class SharedExchange {
 public:
  static constexpr int kMaxRanks = 64;
  // An error naming a dead peer, or "" while all are alive.
  using PeerCheck = std::function<std::string()>;

  // The leader: a fresh memfd for `world` ranks of `capacity_floats` floats each.
  static SharedExchange create(int world, int rank, size_t capacity_floats);
  // A follower: maps the leader's memfd; throws std::runtime_error when its size or header is
  // not one for `world` ranks.
  static SharedExchange attach(UniqueFd fd, int world, int rank);

  SharedExchange(SharedExchange&& other) noexcept;
  SharedExchange& operator=(SharedExchange&&) = delete;
  SharedExchange(const SharedExchange&) = delete;
  ~SharedExchange();

  int fd() const { return fd_.get(); }
  size_t capacity() const { return capacity_; }
  int world() const { return world_; }
  int rank() const { return rank_; }

  // One round (see above). Throws std::runtime_error naming the rank when `peer_check` reports
  // one dead, or when one has not come by `timeout`.
  void exchange(std::span<const float> mine,
                const std::function<void(std::span<const std::span<const float>>)>& use,
                std::chrono::milliseconds timeout, const PeerCheck& peer_check);

 private:
  struct Header;
  SharedExchange(UniqueFd fd, void* base, size_t bytes, int world, int rank, size_t capacity);
  Header& header() const;
  float* slot(int set, int rank) const;
  void wait_for_round(uint32_t round, std::chrono::milliseconds timeout,
                      const PeerCheck& peer_check);

  UniqueFd fd_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  int world_ = 0, rank_ = 0;
  size_t capacity_ = 0;
  uint32_t rounds_ = 0;  // rounds this rank has offered
};

}  // namespace hearth
