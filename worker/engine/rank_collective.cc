#include "worker/engine/rank_collective.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace hearth {

void RankCollective::all_reduce(float* data, size_t count) {
  const size_t chunk = exchange_capacity();
  for (size_t begin = 0; begin < count; begin += chunk) {
    const size_t n = std::min(chunk, count - begin);
    exchange({data + begin, n}, [&](std::span<const std::span<const float>> all) {
      for (size_t r = 0; r < all.size(); ++r)
        if (all[r].size() != n)
          throw std::runtime_error("tensor-parallel rank " + std::to_string(r) + " offered " +
                                   std::to_string(all[r].size()) + " floats to an all-reduce of " +
                                   std::to_string(n) + ": the ranks are out of step");
      float* out = data + begin;
      std::copy_n(all[0].data(), n, out);
      // Rank order, one rounded add at a time: the in-process ranks' sum.
      for (size_t r = 1; r < all.size(); ++r)
        for (size_t i = 0; i < n; ++i) out[i] += all[r][i];
    });
  }
}

void RankCollective::all_gather_rows(
    const float* mine, int rows, int cols, int max_cols,
    const std::function<void(int rank, int first_row, int n, const float* data)>& take) {
  if (cols > max_cols || max_cols <= 0)
    throw std::runtime_error("all_gather_rows: " + std::to_string(cols) + " columns, at most " +
                             std::to_string(max_cols));
  const int chunk_rows = int(std::max<size_t>(1, exchange_capacity() / size_t(max_cols)));
  if (size_t(chunk_rows) * size_t(max_cols) > exchange_capacity())
    throw std::runtime_error("a row of " + std::to_string(max_cols) +
                             " floats does not fit one tensor-parallel exchange");
  for (int first = 0; first < rows; first += chunk_rows) {
    const int n = std::min(chunk_rows, rows - first);
    exchange({mine + size_t(first) * cols, size_t(n) * cols},
             [&](std::span<const std::span<const float>> all) {
               for (size_t r = 0; r < all.size(); ++r) {
                 if (all[r].size() % size_t(n) != 0 || all[r].size() / n > size_t(max_cols))
                   throw std::runtime_error("tensor-parallel rank " + std::to_string(r) +
                                            " offered " + std::to_string(all[r].size()) +
                                            " floats for " + std::to_string(n) +
                                            " rows: the ranks are out of step");
                 take(int(r), first, n, all[r].data());
               }
             });
  }
}

}  // namespace hearth
