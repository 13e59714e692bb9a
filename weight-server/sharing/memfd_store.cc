#include "weight-server/sharing/memfd_store.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "weight-server/model/parallel_for.h"

namespace hearth {

std::unique_ptr<MemfdStore> MemfdStore::create(const HfModel& model,
                                               const MemfdLoadOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<HfTensor>& tensors = model.tensors();
  std::unique_ptr<MemfdStore> store(new MemfdStore);
  store->config_ = model.config();
  store->memfds_.resize(tensors.size());
  store->views_.resize(tensors.size());

  const uint64_t total = std::max<uint64_t>(model.total_bytes(), 1);
  // Small models load in a blink; progress lines would only be noise.
  const bool progress = options.progress && total >= (256ull << 20);
  std::atomic<uint64_t> done{0};
  parallel_for(tensors.size(), options.threads, [&](size_t i) {
    const HfTensor& t = tensors[i];
    store->memfds_[i] = SealedMemfd::create("hearth:" + t.info.name, t.data);
    store->views_[i] =
        MappedFile::map_fd(store->memfds_[i].fd(), t.data.size(), "memfd of '" + t.info.name + "'");
    const uint64_t now = done += t.data.size();
    if (progress && now * 10 / total != (now - t.data.size()) * 10 / total) {
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "hearth-server: %s: %5.1f%% of %.2f GB written to memfds (%.2f GB/s)\n",
                   options.label.c_str(), 100.0 * double(now) / double(total), double(total) / 1e9,
                   double(now) / 1e9 / std::max(s, 1e-9));
    }
  });
  for (size_t i = 0; i < tensors.size(); ++i) {
    store->add_tensor(StoredTensor{tensors[i].info, store->views_[i].data(),
                                   store->memfds_[i].size(), uint32_t(i)});
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  store->timings_ = {done.load(), seconds, seconds};
  return store;
}

UniqueFd MemfdStore::export_allocation(uint32_t id) const {
  if (id >= memfds_.size())
    throw std::out_of_range("allocation " + std::to_string(id) + " does not exist (the model has " +
                            std::to_string(memfds_.size()) + ")");
  return memfds_[id].duplicate();
}

}  // namespace hearth
