#include "weight-server/model/device_store.h"
#include "kernels/cuda_check.h"
#include "kernels/cuda_handles.h"

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

namespace hearth {

namespace {

constexpr size_t kStagingBytes = 32ull << 20;
constexpr uint64_t kPackedAlignment = 256;

// What a tensor becomes on the device: a 2-D f32 matrix is stored as bf16 (an fp8 weight's
// [out, 1] scale is no matrix: it stays as it is).
DType device_dtype(const TensorInfo& t) {
  return t.dtype == DType::F32 && t.shape.size() == 2 && !t.name.ends_with("_scale") ? DType::BF16
                                                                                     : t.dtype;
}

// A piece of one tensor to copy: source bytes on the host, destination on the device.
struct Piece {
  const std::byte* src;
  std::byte* dst;
  uint64_t bytes;  // destination bytes
  bool to_bf16;    // src is f32, 2x the bytes
};

// Copies host pieces to the device: each thread owns a stream and two pinned buffers, so its
// next host copy overlaps its previous transfer.
void transfer(const std::vector<Piece>& pieces, int threads, uint64_t total, bool progress) {
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> done{0};
  std::string failure;
  std::atomic<bool> failed{false};
  const auto start = std::chrono::steady_clock::now();
  auto work = [&] {
    try {
      // Destroyed in reverse: the guard waits for the stream, then buffers and stream go.
      CudaStream stream = make_stream();
      PinnedBuffer staging[2] = {PinnedBuffer(kStagingBytes), PinnedBuffer(kStagingBytes)};
      CudaEvent ready[2] = {make_event(), make_event()};
      // Also on failure: no copy may still read a staging buffer when it is freed.
      struct SyncAtExit {
        cudaStream_t s;
        ~SyncAtExit() { cudaStreamSynchronize(s); }
      } sync_at_exit{stream.get()};
      int slot = 0;
      for (size_t i; !failed && (i = next++) < pieces.size(); slot ^= 1) {
        const Piece& p = pieces[i];
        HEARTH_CUDA_CHECK(cudaEventSynchronize(ready[slot].get()));  // buffer free again
        if (p.to_bf16) {
          const float* f = reinterpret_cast<const float*>(p.src);
          uint16_t* h = staging[slot].get<uint16_t>();
          for (uint64_t e = 0; e < p.bytes / 2; ++e) h[e] = f32_to_bf16(f[e]);
        } else {
          std::memcpy(staging[slot].get(), p.src, p.bytes);
        }
        HEARTH_CUDA_CHECK(cudaMemcpyAsync(p.dst, staging[slot].get(), p.bytes,
                                          cudaMemcpyHostToDevice, stream.get()));
        HEARTH_CUDA_CHECK(cudaEventRecord(ready[slot].get(), stream.get()));
        const uint64_t now = done += p.bytes;
        if (progress && now * 10 / total != (now - p.bytes) * 10 / total) {
          const double s =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          std::fprintf(stderr, "upload: %5.1f%% of %.2f GB (%.1f GB/s)\n", 100.0 * now / total,
                       total / 1e9, now / 1e9 / s);
        }
      }
      HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    } catch (const std::exception& e) {
      if (!failed.exchange(true)) failure = e.what();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  if (failed) throw std::runtime_error("uploading weights failed: " + failure);
}

}  // namespace

std::unique_ptr<DeviceStore> DeviceStore::upload(const HfModel& model, const UploadOptions& opt) {
  HEARTH_CUDA_CHECK(cudaSetDevice(opt.device));
  HEARTH_CUDA_CHECK(cudaFree(nullptr));
  std::unique_ptr<DeviceStore> store(new DeviceStore);
  store->layout_ = opt.layout;
  store->config_ = model.config();
  store->gpu_uuid_ = cuda_device_uuid(opt.device);

  // Destinations first: one VMM allocation per tensor, or offsets in one arena.
  std::vector<std::byte*> dst(model.tensors().size());
  std::vector<uint64_t> offsets(model.tensors().size());
  if (opt.layout == DeviceLayout::Packed) {
    uint64_t cursor = 0;
    for (size_t i = 0; i < model.tensors().size(); ++i) {
      const TensorInfo& t = model.tensors()[i].info;
      offsets[i] = cursor;
      cursor += (t.numel() * dtype_size(device_dtype(t)) + kPackedAlignment - 1) /
                kPackedAlignment * kPackedAlignment;
    }
    store->arena_bytes_ = cursor;
    HEARTH_CUDA_CHECK(cudaMalloc(&store->arena_, cursor));
  }
  for (size_t i = 0; i < model.tensors().size(); ++i) {
    TensorInfo info = model.tensors()[i].info;
    info.dtype = device_dtype(info);
    info.bytes = info.numel() * dtype_size(info.dtype);
    StoredTensor t{info, nullptr, 0, uint32_t(i)};
    if (opt.layout == DeviceLayout::Packed) {
      dst[i] = static_cast<std::byte*>(store->arena_) + offsets[i];
      t.alloc_bytes = info.bytes;
      t.alloc_id = 0;
    } else {
      store->allocations_.push_back(VmmAllocation::create(opt.device, info.bytes));
      dst[i] = static_cast<std::byte*>(store->allocations_.back().data());
      t.alloc_bytes = store->allocations_.back().size();
    }
    t.data = dst[i];
    store->add_tensor(std::move(t));
  }

  std::vector<Piece> pieces;
  uint64_t total = 0;
  for (size_t i = 0; i < model.tensors().size(); ++i) {
    const HfTensor& h = model.tensors()[i];
    const bool convert = device_dtype(h.info) != h.info.dtype;
    const uint64_t dst_bytes = convert ? h.info.bytes / 2 : h.info.bytes;
    for (uint64_t off = 0; off < dst_bytes; off += kStagingBytes) {
      const uint64_t n = std::min<uint64_t>(kStagingBytes, dst_bytes - off);
      pieces.push_back({h.data.data() + (convert ? 2 * off : off), dst[i] + off, n, convert});
    }
    total += dst_bytes;
  }
  const auto start = std::chrono::steady_clock::now();
  transfer(pieces, std::max(1, opt.threads), std::max<uint64_t>(total, 1), opt.progress);
  HEARTH_CUDA_CHECK(cudaDeviceSynchronize());
  store->stats_ = {total,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
  return store;
}

std::unique_ptr<DeviceStore> DeviceStore::adopt(const ModelConfig& config,
                                                std::vector<StoredTensor> tensors,
                                                std::vector<VmmAllocation> allocations,
                                                std::string gpu_uuid) {
  std::unique_ptr<DeviceStore> store(new DeviceStore);
  store->config_ = config;
  store->gpu_uuid_ = std::move(gpu_uuid);
  store->allocations_ = std::move(allocations);
  for (StoredTensor& t : tensors) {
    if (t.alloc_id >= store->allocations_.size())
      throw std::runtime_error("tensor '" + t.info.name + "' refers to a missing allocation");
    const VmmAllocation& a = store->allocations_[t.alloc_id];
    if (t.info.bytes > a.size())
      throw std::runtime_error("tensor '" + t.info.name + "' is larger than its allocation");
    t.data = a.data();
    t.alloc_bytes = a.size();
    store->add_tensor(std::move(t));
  }
  return store;
}

DeviceStore::~DeviceStore() {
  if (arena_) cudaFree(arena_);
}

uint64_t DeviceStore::device_bytes() const {
  if (layout_ == DeviceLayout::Packed) return arena_bytes_;
  uint64_t n = 0;
  for (const VmmAllocation& a : allocations_) n += a.size();
  return n;
}

}  // namespace hearth
