#include "weight-server/sharing/model_import.h"

#include <chrono>
#include <span>
#include <stdexcept>

#include "weight-server/sharing/checksum.h"
#include "weight-server/sharing/imported_memfd_store.h"
#include "weight-server/model/parallel_for.h"
#include "weight-server/sharing/vmm_backend.h"

namespace hearth {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point& mark) {
  const Clock::time_point now = Clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - mark).count();
  mark = now;
  return ms;
}

}  // namespace

std::vector<int> vmm_devices_for_ranks(const Manifest& manifest) {
  std::vector<int> devices;
  for (int r = 0; r < manifest.tensor_parallel; ++r) {
    const std::string uuid = manifest.rank_view(r).gpu_uuid;
    try {
      devices.push_back(vmm_device_for(uuid));
    } catch (const std::runtime_error& e) {
      throw std::runtime_error("model '" + manifest.model + "', rank " + std::to_string(r) + ": " +
                               e.what());
    }
  }
  return devices;
}

Manifest manifest_for_rank(const Manifest& manifest, std::optional<int> rank) {
  if (!rank) {
    if (manifest.sharded())
      throw std::runtime_error("model '" + manifest.model + "' is sharded for tensor parallel " +
                               std::to_string(manifest.tensor_parallel) +
                               ": a worker must import it as one of its ranks (0.." +
                               std::to_string(manifest.tensor_parallel - 1) + ")");
    return manifest;
  }
  return manifest.rank_view(*rank);
}

FetchedManifest fetch_manifest(ipc::Client& client, const std::string& model) {
  ipc::Frame reply = client.call(ipc::op::kManifest, {{"model", model}});
  const auto it = reply.body.find("manifest");
  if (it == reply.body.end())
    throw std::runtime_error("the server's reply to 'manifest' for model '" + model +
                             "' carries no manifest");
  FetchedManifest out;
  out.manifest = parse_manifest(*it);
  if (out.manifest.model != model)
    throw std::runtime_error("asked the server for model '" + model +
                             "' and got the manifest of '" + out.manifest.model + "'");
  out.files = SharedFiles::receive(out.manifest, std::move(reply.fds));
  return out;
}

ImportedModel import_served_model(ipc::Client& client, const std::string& model,
                                  const ImportOptions& options) {
  ImportedModel out;
  Clock::time_point mark = Clock::now();
  FetchedManifest fetched = fetch_manifest(client, model);
  const bool whole = fetched.manifest.sharded() && !options.rank && options.all_ranks;
  if (fetched.manifest.sharded() && options.rank) out.whole_manifest = fetched.manifest;
  out.manifest =
      whole ? std::move(fetched.manifest) : manifest_for_rank(fetched.manifest, options.rank);
  out.files = std::move(fetched.files);
  out.timings.manifest_ms = ms_since(mark);

  // The GPU is checked before importing anything: a worker on the wrong device should fail
  // before it takes a lease or a single descriptor.
  // Every rank's GPU (by UUID: this process may number the devices otherwise) is found before
  // the first descriptor is taken.
  int device = -1;
  std::vector<int> rank_devices;
  if (out.manifest.backend == "vmm") {
    if (whole) {
      rank_devices = vmm_devices_for_ranks(out.manifest);
      device = rank_devices[0];
    } else {
      device = vmm_device_for(out.manifest.gpu_uuid);
    }
    if (options.on_device) options.on_device(out.manifest, device);
    out.timings.gpu_ms = ms_since(mark);
  }

  if (whole) {
    // Rank by rank; a failure drops the ranks already mapped with `out`.
    for (int r = 0; r < out.manifest.tensor_parallel; ++r) {
      const Manifest view = out.manifest.rank_view(r);
      std::vector<UniqueFd> fds = client.import_allocations(model, view.allocation_ids());
      if (rank_devices.empty())
        out.ranks.push_back(std::make_shared<ImportedMemfdStore>(view, std::move(fds)));
      else
        out.ranks.push_back(import_vmm_store(view, std::move(fds), rank_devices[size_t(r)]));
    }
    out.store = out.ranks[0];
    out.timings.import_ms = ms_since(mark);
  } else {
    const std::vector<uint64_t> ids = out.manifest.allocation_ids();
    std::vector<UniqueFd> fds = client.import_allocations(model, ids);
    out.timings.import_ms = ms_since(mark);

    if (out.manifest.backend == "memfd")
      out.store = std::make_shared<ImportedMemfdStore>(out.manifest, std::move(fds));
    else
      out.store = import_vmm_store(out.manifest, std::move(fds), device);
  }
  out.timings.map_ms = ms_since(mark);

  if (options.verify && whole) {
    for (int r = 0; r < out.manifest.tensor_parallel; ++r)
      verify_weights(*out.ranks[size_t(r)], out.manifest.rank_view(r), options.verify_threads);
    out.timings.verify_ms = ms_since(mark);
  } else if (options.verify) {
    verify_weights(*out.store, out.manifest, options.verify_threads);
    out.timings.verify_ms = ms_since(mark);
  }
  return out;
}

void verify_weights(const WeightStore& store, const Manifest& manifest, int threads) {
  const bool device = store.residence() == Residence::Device;
  // Device read-back goes through one pinned buffer per call; hashing host memory is what
  // parallelises.
  parallel_for(manifest.tensors.size(), device ? 1 : threads, [&](size_t i) {
    const ManifestTensor& want = manifest.tensors[i];
    const StoredTensor& got = store.at(want.info.name);
    const uint64_t sum =
        device ? device_checksum(got.data, want.info.bytes)
               : xxh3_checksum({static_cast<const std::byte*>(got.data), size_t(want.info.bytes)});
    if (sum != want.xxh3)
      throw std::runtime_error("model '" + manifest.model + "', tensor '" + want.info.name +
                               "': xxh3 " + checksum_to_hex(sum) + " differs from the manifest's " +
                               checksum_to_hex(want.xxh3) +
                               ": the imported weights are not what the server loaded");
  });
}

}  // namespace hearth
