#include "weight-server/daemon/served_model.h"

#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "weight-server/sharing/checksum.h"
#include "weight-server/model/quantize_at_load.h"
#include "weight-server/sharing/memfd_store.h"
#include "weight-server/sharing/sharded_memfd_store.h"
#include "weight-server/daemon/tensor_parallel_devices.h"
#include "weight-server/model/parallel_for.h"
#include "weight-server/sharing/vmm_backend.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::span<const std::byte> bytes_of(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

// The tokenizer image of the model's tokenizer.json, built once here so that workers map it
// instead of parsing the JSON. A tokenizer hearth cannot load gets no image: the model is still
// served, and a worker that needs the tokenizer reports the parser's own error.
std::vector<std::byte> tokenizer_image(const HfModel& model,
                                       const std::function<void(const std::string&)>& log) {
  if (model.tokenizer_json().empty()) return {};
  try {
    return Tokenizer::build_image(model.tokenizer_json());
  } catch (const std::exception& e) {
    log("no tokenizer image for " + model.dir().string() + ": " + e.what());
    return {};
  }
}

template <typename... Args>
std::string format(const char* fmt, Args... args) {
  char text[160];
  std::snprintf(text, sizeof text, fmt, args...);
  return text;
}

}  // namespace

json ServedModel::summary() const {
  const LoadTimings& t = store->load_timings();
  json s = {{"name", name},
            {"dir", dir.string()},
            {"backend", store->backend_name()},
            {"tensors", store->tensors().size()},
            {"bytes", t.bytes},
            {"allocation_bytes", store->allocation_bytes()},
            {"load",
             {{"seconds", total_seconds},
              {"open_seconds", open_seconds},
              {"write_seconds", t.seconds},
              {"copy_seconds", t.copy_seconds},
              {"copy_gb_per_s", t.copy_seconds > 0 ? double(t.bytes) / 1e9 / t.copy_seconds : 0.0},
              {"checksum_seconds", checksum_seconds},
              {"tokenizer_image_seconds", image_seconds}}}};
  if (!store->gpu_uuid().empty()) s["gpu_uuid"] = store->gpu_uuid();
  if (const ShardedLayout* sharded = store->sharded()) {
    // Per rank: its device (null on the host), how many pieces and bytes it holds.
    s["tensor_parallel"] = sharded->plan.ranks();
    json ranks = json::array();
    for (int r = 0; r < sharded->plan.ranks(); ++r) {
      uint64_t pieces = 0, bytes = 0, allocation = 0;
      for (size_t i = 0; i < store->tensors().size(); ++i)
        if (sharded->ranks[i] == r) {
          ++pieces;
          bytes += store->tensors()[i].info.bytes;
          allocation += store->tensors()[i].alloc_bytes;
        }
      const int device = sharded->devices[size_t(r)];
      json rank = {{"rank", r},
                   {"device", device < 0 ? json(nullptr) : json(device)},
                   {"tensors", pieces},
                   {"bytes", bytes},
                   {"allocation_bytes", allocation}};
      if (device >= 0) rank["gpu_uuid"] = sharded->gpu_uuids[size_t(r)];
      ranks.push_back(std::move(rank));
    }
    s["ranks"] = std::move(ranks);
  }
  return s;
}

std::unique_ptr<ServedModel> load_served_model(const ModelSpec& spec, const ServeOptions& options) {
  auto log = [&](const std::string& line) {
    if (options.log) options.log(line);
  };
  const Clock::time_point start = Clock::now();
  auto served = std::make_unique<ServedModel>();
  served->name = spec.name;
  served->dir = spec.dir;
  log("loading '" + spec.name + "' from " + spec.dir.string() + " (" + options.backend +
      " backend" +
      (options.tensor_parallel > 1 ? ", tensor parallel " + std::to_string(options.tensor_parallel)
                                   : std::string()) +
      ")");
  const HfModel opened = [&] {
    if (!options.open_as) return HfModel::open(spec.dir);
    // Every file is opened here (the shards are mapped): after this, the rights no longer
    // matter, and the server's own identity comes back.
    const FileIdentityScope as_requester(*options.open_as);
    try {
      return HfModel::open(spec.dir);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(std::string(e.what()) +
                               " (opened with the rights of the requester, " +
                               options.open_as->describe() + ")");
    }
  }();
  const bool quantize = options.quantize_fp8 && !opened.config().quantization.fp8();
  const HfModel model = quantize ? quantize_fp8_at_load(opened, options.threads) : opened;
  if (quantize) log("quantized '" + spec.name + "' to fp8 (per-channel scales)");
  served->open_seconds = seconds_since(start);

  // A sharded vmm store's checksums come with its upload (hashed on the host before the copy).
  std::vector<uint64_t> uploaded_checksums;
  if (options.tensor_parallel > 1) {
    // The GPUs first: a machine without enough of them fails whatever the model.
    const std::vector<int> devices =
        options.backend == "vmm" ? resolve_tensor_parallel_devices(
                                       options.devices, options.tensor_parallel, vmm_device_count())
                                 : std::vector<int>{};
    const ShardPlan plan = ShardPlan::make(model.config(), options.tensor_parallel);
    if (options.backend == "memfd") {
      served->store =
          ShardedMemfdStore::create(model, plan, {options.threads, options.progress, spec.name});
    } else if (options.backend == "vmm") {
      VmmLoadOptions vmm{devices[0], options.threads, options.progress, options.memory_fraction,
                         options.device_memory_bytes};
      served->store = upload_sharded_vmm_store(model, plan, devices, vmm, uploaded_checksums);
    } else {
      throw std::runtime_error("unknown backend '" + options.backend + "' (memfd or vmm)");
    }
  } else if (options.backend == "memfd") {
    served->store = MemfdStore::create(model, {options.threads, options.progress, spec.name});
  } else if (options.backend == "vmm") {
    served->store = upload_vmm_store(model, {options.device, options.threads, options.progress});
  } else {
    throw std::runtime_error("unknown backend '" + options.backend + "' (memfd or vmm)");
  }

  // Checksums of the bytes as stored, computed from the source: the GPU store differs from the
  // files only where it rounds f32 matrices to bf16, which is reproduced here.
  const Clock::time_point hashing = Clock::now();
  const ExportableStore& store = *served->store;
  const ShardedLayout* sharded = store.sharded();
  const bool hashed = !uploaded_checksums.empty();
  std::vector<uint64_t> checksums(store.tensors().size());
  if (hashed) checksums = std::move(uploaded_checksums);
  parallel_for(hashed ? 0 : checksums.size(), options.threads, [&](size_t i) {
    const StoredTensor& stored = store.tensors()[i];
    if (sharded) {  // memfd pieces keep their source's dtype: hash what was stored
      checksums[i] = xxh3_checksum({static_cast<const std::byte*>(stored.data), stored.info.bytes});
      return;
    }
    const HfTensor* source = model.find(stored.info.name);
    if (!source) throw std::logic_error("stored tensor '" + stored.info.name + "' has no source");
    checksums[i] = xxh3_checksum_as_stored(source->data, source->info.dtype, stored.info.dtype);
  });
  served->checksum_seconds = seconds_since(hashing);

  const Clock::time_point imaging = Clock::now();
  const std::vector<std::byte> image = tokenizer_image(model, log);
  served->image_seconds = seconds_since(imaging);
  served->files =
      share_files(spec.name, {{kTokenizerJsonFile, bytes_of(model.tokenizer_json())},
                              {kTokenizerConfigFile, bytes_of(model.tokenizer_config_json())},
                              {kGenerationConfigFile, bytes_of(model.generation_config_json())},
                              {kTokenizerImageFile, image}});

  // Round-tripped through the parser, so the server never hands out a manifest its own workers
  // would refuse.
  served->manifest = manifest_to_json(
      sharded ? build_sharded_manifest(spec.name, model, store, checksums, served->files.entries,
                                       sharded->plan, sharded->ranks, sharded->devices,
                                       sharded->gpu_uuids)
              : build_manifest(spec.name, model, store, checksums, served->files.entries));
  parse_manifest(served->manifest);
  served->total_seconds = seconds_since(start);

  const LoadTimings& t = store.load_timings();
  log("loaded '" + spec.name + "': " + std::to_string(store.tensors().size()) + " tensors, " +
      format("%.3f GB in %.2f s (copy %.2f GB/s)", double(t.bytes) / 1e9, served->total_seconds,
             t.copy_seconds > 0 ? double(t.bytes) / 1e9 / t.copy_seconds : 0.0) +
      format(", checksums %.2f s, tokenizer image %.2f s", served->checksum_seconds,
             served->image_seconds) +
      (store.gpu_uuid().empty() ? "" : " on " + store.gpu_uuid()));
  return served;
}

}  // namespace hearth
