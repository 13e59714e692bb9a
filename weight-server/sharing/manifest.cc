#include "weight-server/sharing/manifest.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include "base/json_limits.h"
#include "weight-server/model/hf_model.h"
#include "base/read_file.h"
#include "weight-server/sharing/checksum.h"

namespace hearth {

namespace {

using json = nlohmann::json;

// Bounds that no real model comes near; they keep a hostile manifest from making the worker
// allocate or loop without end before the tensor list is compared with the architecture.
constexpr size_t kMaxTensors = 1 << 20;
constexpr size_t kMaxDims = 8;
constexpr uint64_t kMaxAllocationBytes = uint64_t{1} << 44;
constexpr int kMaxDeviceIndex = 1023;

// config.json sits at depth 3 of a manifest reply ({"manifest": {"architecture": {...}}}), so
// one that a loader accepted always fits in a frame.
static_assert(kMaxEmbeddedJsonDepth + 2 <= kMaxJsonDepth);

// Error helper: every message names the model (once known) and the place in the manifest.
class Reader {
 public:
  std::string model = "?";

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("manifest of model '" + model + "': " + what);
  }

  // "EXPECTATION, got TYPE VALUE": a wrong type is said as what it is.
  static std::string got(const std::string& expectation, const json& v) {
    return expectation + ", got " + v.type_name() + " " + json_excerpt(v, 40);
  }

  const json& field(const json& object, const char* key, const std::string& where) const {
    const auto it = object.find(key);
    if (it == object.end()) fail(where + "has no '" + key + "'");
    return *it;
  }
  std::string string(const json& object, const char* key, const std::string& where = "") const {
    const json& v = field(object, key, where);
    if (!v.is_string()) fail(where + "'" + key + "' " + got("must be a string", v));
    return v.get<std::string>();
  }
  uint64_t unsigned_int(const json& object, const char* key, const std::string& where = "") const {
    const json& v = field(object, key, where);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      fail(where + "'" + key + "' " + got("must be a non-negative integer", v));
    return v.get<uint64_t>();
  }
};

// files: {name: {"bytes", "xxh3", "fd"} or null}. The descriptors are attached in index order,
// so the indexes must be exactly 0..n-1 for the worker to match them.
std::vector<ManifestFile> parse_files(const Reader& r, const json& files) {
  if (!files.is_object()) r.fail("'files' is not an object");
  std::vector<ManifestFile> out;
  for (const auto& [name, entry] : files.items()) {
    const std::string where = "files['" + name + "']: ";
    if (std::find(std::begin(kManifestFileNames), std::end(kManifestFileNames), name) ==
        std::end(kManifestFileNames))
      r.fail("unknown file '" + name + "'");
    if (entry.is_null()) continue;
    if (!entry.is_object()) r.fail(where + "not an object or null");
    ManifestFile f;
    f.name = name;
    f.bytes = r.unsigned_int(entry, "bytes", where);
    if (f.bytes == 0 || f.bytes > kMaxTextFileBytes)
      r.fail(where + "'bytes' " + std::to_string(f.bytes) + " is not in 1.." +
             std::to_string(kMaxTextFileBytes));
    const std::string checksum = r.string(entry, "xxh3", where);
    const auto value = checksum_from_hex(checksum);
    if (!value) r.fail(where + "'xxh3' is '" + checksum + "', not 16 lower-case hex digits");
    f.xxh3 = *value;
    const uint64_t fd = r.unsigned_int(entry, "fd", where);
    if (fd >= std::size(kManifestFileNames))
      r.fail(where + "'fd' " + std::to_string(fd) + " is out of range");
    f.fd = uint32_t(fd);
    out.push_back(std::move(f));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.fd < b.fd; });
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].fd != i)
      r.fail("files['" + out[i].name + "']: 'fd' " + std::to_string(out[i].fd) +
             (i > 0 && out[i - 1].fd == out[i].fd ? " is used twice" : " leaves a gap") +
             " (the indexes must be 0.." + std::to_string(out.size() - 1) + ")");
  return out;
}

ManifestTensor parse_tensor(const Reader& r, const json& t, size_t index) {
  std::string where = "tensors[" + std::to_string(index) + "]: ";
  if (!t.is_object()) r.fail(where + "not an object");
  ManifestTensor out;
  out.info.name = r.string(t, "name", where);
  if (out.info.name.empty()) r.fail(where + "empty name");
  where = "tensor '" + out.info.name + "': ";
  const std::string dtype = r.string(t, "dtype", where);
  const auto parsed = parse_dtype(dtype);
  if (!parsed) r.fail(where + "unsupported dtype '" + dtype + "' (F32, F16, BF16 or F8_E4M3)");
  out.info.dtype = *parsed;
  const json& shape = r.field(t, "shape", where);
  if (!shape.is_array() || shape.size() > kMaxDims)
    r.fail(
        where + "'shape' " +
        Reader::got("must be an array of at most " + std::to_string(kMaxDims) + " sizes", shape));
  uint64_t numel = 1;
  for (const json& d : shape) {
    if (!d.is_number_integer() || d.get<int64_t>() <= 0 || d.get<int64_t>() > (int64_t{1} << 40))
      r.fail(where + "'shape' holds " + json_excerpt(d) + ", not a positive size");
    out.info.shape.push_back(d.get<int64_t>());
    if (__builtin_mul_overflow(numel, uint64_t(d.get<int64_t>()), &numel))
      r.fail(where + "the shape's element count overflows");
  }
  out.info.bytes = r.unsigned_int(t, "bytes", where);
  uint64_t implied = 0;
  if (__builtin_mul_overflow(numel, uint64_t(dtype_size(out.info.dtype)), &implied) ||
      implied != out.info.bytes)
    r.fail(where + "'bytes' is " + std::to_string(out.info.bytes) + " but " + dtype + " " +
           out.info.shape_string() + " takes " + std::to_string(implied));
  out.allocation_bytes = r.unsigned_int(t, "allocation_bytes", where);
  if (out.allocation_bytes < out.info.bytes || out.allocation_bytes > kMaxAllocationBytes)
    r.fail(where + "'allocation_bytes' " + std::to_string(out.allocation_bytes) +
           " cannot hold its " + std::to_string(out.info.bytes) + " bytes");
  out.allocation = r.unsigned_int(t, "allocation", where);
  const std::string checksum = r.string(t, "xxh3", where);
  const auto value = checksum_from_hex(checksum);
  if (!value) r.fail(where + "'xxh3' is '" + checksum + "', not 16 lower-case hex digits");
  out.xxh3 = *value;
  return out;
}

// The tensors must be exactly those the architecture implies: a manifest that adds, drops or
// reshapes one would have the engine read past an allocation or miss a weight.
void check_against_architecture(const Reader& r, const Manifest& m) {
  std::map<std::string, const ManifestTensor*> by_name;
  std::set<uint64_t> allocations;
  for (const ManifestTensor& t : m.tensors) {
    if (!by_name.emplace(t.info.name, &t).second)
      r.fail("tensor '" + t.info.name + "' appears twice");
    if (!allocations.insert(t.allocation).second)
      r.fail("allocation " + std::to_string(t.allocation) + " is used by two tensors (one is '" +
             t.info.name + "')");
  }
  for (const ExpectedTensor& want : expected_tensors(m.config)) {
    const auto it = by_name.find(want.name);
    if (it == by_name.end()) r.fail("missing tensor '" + want.name + "'");
    const TensorInfo& got = it->second->info;
    if (const std::string why = tensor_mismatch(want, got.dtype, got.shape, "the architecture");
        !why.empty())
      r.fail(why);
    by_name.erase(it);
  }
  if (!by_name.empty())
    r.fail("unexpected tensor '" + by_name.begin()->first + "' for " + m.config.architecture_name);
}

TensorSlice parse_slice(const Reader& r, const json& t, const std::string& where) {
  const json& v = r.field(t, "slice", where);
  if (!v.is_object()) r.fail(where + "'slice' " + Reader::got("must be an object", v));
  const std::string split = r.string(v, "split", where + "slice: ");
  TensorSlice out;
  if (split == "rows")
    out.split = ShardSplit::Rows;
  else if (split == "columns")
    out.split = ShardSplit::Columns;
  else if (split != "replicated")
    r.fail(where + "slice: unknown split '" + split + "' (rows, columns or replicated)");
  out.begin =
      int64_t(std::min<uint64_t>(r.unsigned_int(v, "begin", where + "slice: "), 1ull << 40));
  out.end = int64_t(std::min<uint64_t>(r.unsigned_int(v, "end", where + "slice: "), 1ull << 40));
  return out;
}

std::string describe(const TensorSlice& s) {
  return std::string(shard_split_name(s.split)) + " [" + std::to_string(s.begin) + ", " +
         std::to_string(s.end) + ")";
}

// Each rank must hold exactly its pieces of the shard plan: the same names, slices and shapes.
// A piece missing, overlapping another rank's or shaped otherwise would have a rank compute on
// the wrong rows, or read past an allocation.
void check_against_plan(const Reader& r, const Manifest& m, const ShardPlan& plan) {
  std::set<uint64_t> allocations;
  for (const ManifestTensor& t : m.tensors)
    if (!allocations.insert(t.allocation).second)
      r.fail("allocation " + std::to_string(t.allocation) + " is used by two tensors (one is '" +
             t.info.name + "' of rank " + std::to_string(t.rank) + ")");
  // Each piece's dtype as its whole tensor's role allows (an fp8 scale piece stays a scale).
  std::map<std::string, ExpectedTensor> roles;
  for (const ExpectedTensor& t : expected_tensors(m.config)) roles.emplace(t.name, t);
  size_t i = 0;
  for (int rank = 0; rank < m.tensor_parallel; ++rank) {
    const std::string where = "rank " + std::to_string(rank) + ": ";
    std::map<std::string, const ManifestTensor*> by_name;
    for (; i < m.tensors.size() && m.tensors[i].rank == rank; ++i)
      if (!by_name.emplace(m.tensors[i].info.name, &m.tensors[i]).second)
        r.fail(where + "tensor '" + m.tensors[i].info.name + "' appears twice");
    for (const TensorShard& want : plan.tensors(rank)) {
      const auto it = by_name.find(want.name);
      if (it == by_name.end()) r.fail(where + "missing its shard of tensor '" + want.name + "'");
      const ManifestTensor& got = *it->second;
      if (got.slice != want.slice)
        r.fail(where + "tensor '" + want.name + "' holds " + describe(got.slice) + ", but rank " +
               std::to_string(rank) + " of " + std::to_string(m.tensor_parallel) + " holds " +
               describe(want.slice) +
               " (the ranks' slices tile each tensor in rank order, none overlapping)");
      if (got.info.shape != want.shape) {
        const TensorInfo expected{want.name, got.info.dtype, want.shape, 0};
        r.fail(where + "tensor '" + want.name + "' has shape " + got.info.shape_string() +
               ", its slice implies " + expected.shape_string());
      }
      ExpectedTensor piece = roles.at(want.name);
      piece.shape = want.shape;
      if (const std::string why =
              tensor_mismatch(piece, got.info.dtype, got.info.shape, "its slice");
          !why.empty())
        r.fail(where + why);
      by_name.erase(it);
    }
    if (!by_name.empty())
      r.fail(where + "unexpected tensor '" + by_name.begin()->first + "' for " +
             m.config.architecture_name);
  }
}

json tensor_to_json(const ManifestTensor& t, bool sharded) {
  json j = {{"name", t.info.name},
            {"dtype", std::string(dtype_name(t.info.dtype))},
            {"shape", t.info.shape},
            {"bytes", t.info.bytes},
            {"allocation_bytes", t.allocation_bytes},
            {"allocation", t.allocation},
            {"xxh3", checksum_to_hex(t.xxh3)}};
  if (sharded)
    j["slice"] = {
        {"split", shard_split_name(t.slice.split)}, {"begin", t.slice.begin}, {"end", t.slice.end}};
  return j;
}

// Measured as encoded, escapes included, when the server builds the manifest at load.
void check_fits_in_a_reply(const Manifest& m, const json& j) {
  size_t bytes = 0;
  try {
    bytes = j.dump().size();
  } catch (const json::exception& e) {
    throw std::runtime_error("manifest of model '" + m.model + "' cannot be encoded: " + e.what());
  }
  if (bytes > kMaxManifestBytes)
    throw std::runtime_error("model '" + m.model + "': its manifest would be " +
                             std::to_string(bytes) + " bytes, more than the " +
                             std::to_string(kMaxManifestBytes) + " a reply can carry to a worker");
}

// The UUID a rank's device has (cuda_device_uuid: "GPU-" and hex digits with dashes), the key a
// worker finds the device by. Bounded and printable, since it ends up in error messages.
std::string parse_device_uuid(const Reader& r, const json& entry, const std::string& where) {
  const json& v = r.field(entry, "gpu_uuid", where);
  if (!v.is_string()) r.fail(where + "'gpu_uuid' " + Reader::got("must be the device's UUID", v));
  const std::string uuid = v.get<std::string>();
  const bool shaped = uuid.size() > 4 && uuid.size() <= 64 && uuid.starts_with("GPU-") &&
                      std::all_of(uuid.begin() + 4, uuid.end(), [](char c) {
                        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == '-';
                      });
  if (!shaped)
    r.fail(where + "'gpu_uuid' " + json_excerpt(v, 40) +
           " is not a device UUID (GPU- and lower-case hex digits)");
  return uuid;
}

// Each rank on a GPU of its own: two ranks on one device (by index or by UUID) would double
// that device's share, and rank 0's UUID is the top-level gpu_uuid older readers look at.
void check_devices(const Reader& r, const Manifest& m) {
  std::map<int, int> by_index;
  std::map<std::string, int> by_uuid;
  for (int rank = 0; rank < m.tensor_parallel; ++rank) {
    const std::string where = "rank " + std::to_string(rank) + ": ";
    const auto [index, fresh_index] = by_index.emplace(m.devices[size_t(rank)], rank);
    if (!fresh_index)
      r.fail(where + "device " + std::to_string(m.devices[size_t(rank)]) + " is rank " +
             std::to_string(index->second) + "'s too (one GPU per rank)");
    const auto [uuid, fresh_uuid] = by_uuid.emplace(m.device_uuids[size_t(rank)], rank);
    if (!fresh_uuid)
      r.fail(where + "GPU " + uuid->first + " is rank " + std::to_string(uuid->second) +
             "'s too (one GPU per rank)");
  }
  if (m.device_uuids[0] != m.gpu_uuid)
    r.fail("'gpu_uuid' " + m.gpu_uuid + " is not rank 0's GPU " + m.device_uuids[0]);
}

// "tensor_parallel" and "ranks": [{"rank", "device", "tensors"}], one entry per rank, in any
// order; the pieces are kept rank after rank.
ShardPlan parse_ranks(const Reader& r, const json& j, Manifest& m) {
  const json& n = r.field(j, "tensor_parallel", "");
  if (!n.is_number_integer() || n.get<int64_t>() < 2 || n.get<int64_t>() > kMaxTensorParallel)
    r.fail("'tensor_parallel' " +
           Reader::got("must be an integer in 2.." + std::to_string(kMaxTensorParallel), n));
  m.tensor_parallel = n.get<int>();
  // The degree must suit the architecture before any rank is read against it.
  const ShardPlan plan = [&] {
    try {
      return ShardPlan::make(m.config, m.tensor_parallel);
    } catch (const std::runtime_error& e) {
      r.fail(e.what());
    }
  }();
  const json& ranks = r.field(j, "ranks", "");
  if (!ranks.is_array()) r.fail("'ranks' is not an array");
  std::vector<const json*> by_rank(size_t(m.tensor_parallel), nullptr);
  for (size_t i = 0; i < ranks.size(); ++i) {
    const json& entry = ranks[i];
    const std::string where = "ranks[" + std::to_string(i) + "]: ";
    if (!entry.is_object()) r.fail(where + "not an object");
    const uint64_t rank = r.unsigned_int(entry, "rank", where);
    if (rank >= uint64_t(m.tensor_parallel))
      r.fail(where + "rank " + std::to_string(rank) + " is out of range (tensor_parallel " +
             std::to_string(m.tensor_parallel) + " has ranks 0.." +
             std::to_string(m.tensor_parallel - 1) + ")");
    if (by_rank[rank]) r.fail(where + "rank " + std::to_string(rank) + " is listed twice");
    by_rank[rank] = &entry;
  }
  size_t total = 0;
  for (int rank = 0; rank < m.tensor_parallel; ++rank) {
    const std::string where = "rank " + std::to_string(rank) + ": ";
    if (!by_rank[size_t(rank)]) r.fail(where + "missing (no entry in 'ranks' holds its shard)");
    const json& entry = *by_rank[size_t(rank)];
    const json& device = r.field(entry, "device", where);
    if (m.backend == "vmm") {
      if (!device.is_number_integer() || device.get<int64_t>() < 0 ||
          device.get<int64_t>() > kMaxDeviceIndex)
        r.fail(where + "'device' " +
               Reader::got("must be a CUDA device index 0.." + std::to_string(kMaxDeviceIndex),
                           device));
      m.devices.push_back(device.get<int>());
      m.device_uuids.push_back(parse_device_uuid(r, entry, where));
    } else {
      if (!device.is_null()) r.fail(where + "'device' must be null for the memfd backend");
      if (const auto it = entry.find("gpu_uuid"); it != entry.end() && !it->is_null())
        r.fail(where + "'gpu_uuid' must be null or absent for the memfd backend");
      m.devices.push_back(-1);
      m.device_uuids.push_back("");
    }
    const json& tensors = r.field(entry, "tensors", where);
    if (!tensors.is_array()) r.fail(where + "'tensors' is not an array");
    total += tensors.size();
    if (total > kMaxTensors) r.fail("too many tensors (" + std::to_string(total) + ")");
    for (size_t i = 0; i < tensors.size(); ++i) {
      ManifestTensor t = parse_tensor(r, tensors[i], i);
      t.rank = rank;
      t.slice = parse_slice(r, tensors[i], where + "tensor '" + t.info.name + "': ");
      m.tensors.push_back(std::move(t));
    }
  }
  if (m.backend == "vmm") check_devices(r, m);
  return plan;
}

}  // namespace

Manifest Manifest::rank_view(int rank) const {
  if (!sharded())
    throw std::runtime_error("model '" + model +
                             "' is not sharded for tensor parallelism: it has no rank " +
                             std::to_string(rank));
  if (rank < 0 || rank >= tensor_parallel)
    throw std::runtime_error("model '" + model + "' is sharded for tensor parallel " +
                             std::to_string(tensor_parallel) + ": rank " + std::to_string(rank) +
                             " is not in 0.." + std::to_string(tensor_parallel - 1));
  Manifest view = *this;
  if (size_t(rank) < device_uuids.size() && !device_uuids[size_t(rank)].empty())
    view.gpu_uuid = device_uuids[size_t(rank)];
  view.tensors.clear();
  for (const ManifestTensor& t : tensors)
    if (t.rank == rank) view.tensors.push_back(t);
  return view;
}

uint64_t Manifest::tensor_bytes() const {
  uint64_t n = 0;
  for (const ManifestTensor& t : tensors) n += t.info.bytes;
  return n;
}

uint64_t Manifest::allocation_bytes() const {
  uint64_t n = 0;
  for (const ManifestTensor& t : tensors) n += t.allocation_bytes;
  return n;
}

const ManifestFile* Manifest::file(std::string_view name) const {
  for (const ManifestFile& f : files)
    if (f.name == name) return &f;
  return nullptr;
}

std::vector<uint64_t> Manifest::allocation_ids() const {
  std::vector<uint64_t> ids;
  ids.reserve(tensors.size());
  for (const ManifestTensor& t : tensors) ids.push_back(t.allocation);
  return ids;
}

Manifest build_manifest(const std::string& name, const HfModel& model, const ExportableStore& store,
                        const std::vector<uint64_t>& checksums, std::vector<ManifestFile> files) {
  Manifest m;
  m.model = name;
  m.backend = store.backend_name();
  m.gpu_uuid = store.gpu_uuid();
  m.architecture = json::parse(model.config_json());
  m.config = store.config();
  m.files = std::move(files);
  for (size_t i = 0; i < store.tensors().size(); ++i) {
    const StoredTensor& t = store.tensors()[i];
    m.tensors.push_back(ManifestTensor{t.info, t.alloc_bytes, t.alloc_id, checksums.at(i), 0, {}});
  }
  return m;
}

Manifest build_sharded_manifest(const std::string& name, const HfModel& model,
                                const ExportableStore& store,
                                const std::vector<uint64_t>& checksums,
                                std::vector<ManifestFile> files, const ShardPlan& plan,
                                const std::vector<int>& ranks, std::vector<int> devices,
                                std::vector<std::string> device_uuids) {
  Manifest m = build_manifest(name, model, store, checksums, std::move(files));
  m.tensor_parallel = plan.ranks();
  m.devices = std::move(devices);
  m.device_uuids = std::move(device_uuids);
  if (!m.device_uuids.empty() && !m.device_uuids[0].empty()) m.gpu_uuid = m.device_uuids[0];
  std::vector<size_t> next(size_t(plan.ranks()), 0);  // each rank's pieces in plan order
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const int rank = ranks.at(i);
    m.tensors[i].rank = rank;
    m.tensors[i].slice = plan.tensors(rank).at(next[size_t(rank)]++).slice;
  }
  return m;
}

json manifest_to_json(const Manifest& m) {
  json tensors = json::array();
  if (!m.sharded())
    for (const ManifestTensor& t : m.tensors) tensors.push_back(tensor_to_json(t, false));
  auto text = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  json files = json::object();
  for (std::string_view name : kManifestFileNames) files[std::string(name)] = nullptr;
  for (const ManifestFile& f : m.files)
    files[f.name] = {{"bytes", f.bytes}, {"xxh3", checksum_to_hex(f.xxh3)}, {"fd", f.fd}};
  json j = {{"format", kManifestFormat},
            {"version", m.sharded() ? kShardedManifestVersion : kManifestVersion},
            {"model", m.model},
            {"backend", m.backend},
            {"gpu_uuid", text(m.gpu_uuid)},
            {"architecture", m.architecture},
            {"files", std::move(files)},
            {"tensor_bytes", m.tensor_bytes()},
            {"allocation_bytes", m.allocation_bytes()},
            {"tensors", std::move(tensors)}};
  if (m.sharded()) {
    j.erase("tensors");
    j["tensor_parallel"] = m.tensor_parallel;
    json ranks = json::array();
    for (int r = 0; r < m.tensor_parallel; ++r) {
      json pieces = json::array();
      for (const ManifestTensor& t : m.tensors)
        if (t.rank == r) pieces.push_back(tensor_to_json(t, true));
      const int device = size_t(r) < m.devices.size() ? m.devices[size_t(r)] : -1;
      const std::string uuid = size_t(r) < m.device_uuids.size() ? m.device_uuids[size_t(r)] : "";
      json entry = {{"rank", r}, {"device", device < 0 ? json(nullptr) : json(device)}};
      if (!uuid.empty()) entry["gpu_uuid"] = uuid;  // vmm only: memfd ranks have no device
      entry["tensors"] = std::move(pieces);
      ranks.push_back(std::move(entry));
    }
    j["ranks"] = std::move(ranks);
  }
  check_fits_in_a_reply(m, j);
  return j;
}

Manifest parse_manifest(const json& j) {
  Reader r;
  if (!j.is_object()) r.fail("not a JSON object");
  if (const auto it = j.find("model"); it != j.end() && it->is_string())
    r.model = it->get<std::string>();
  if (r.string(j, "format") != kManifestFormat)
    r.fail("'format' is not '" + std::string(kManifestFormat) + "'");
  const json& version = r.field(j, "version", "");
  if (!version.is_number_integer() || (version.get<int64_t>() != kManifestVersion &&
                                       version.get<int64_t>() != kShardedManifestVersion))
    r.fail("version " + json_excerpt(version) + " is not supported (this build reads versions " +
           std::to_string(kManifestVersion) + " and " + std::to_string(kShardedManifestVersion) +
           ")");
  const bool sharded = version.get<int64_t>() == kShardedManifestVersion;

  Manifest m;
  m.model = r.string(j, "model");
  m.backend = r.string(j, "backend");
  if (m.backend != "memfd" && m.backend != "vmm")
    r.fail("unknown backend '" + m.backend + "' (memfd or vmm)");
  const json& uuid = r.field(j, "gpu_uuid", "");
  if (m.backend == "vmm") {
    if (!uuid.is_string() || uuid.get<std::string>().empty())
      r.fail("the vmm backend needs the GPU's 'gpu_uuid'");
    m.gpu_uuid = uuid.get<std::string>();
  } else if (!uuid.is_null()) {
    r.fail("'gpu_uuid' must be null for the " + m.backend + " backend");
  }

  m.architecture = r.field(j, "architecture", "");
  if (!m.architecture.is_object()) r.fail("'architecture' is not an object (a config.json)");
  m.config =
      parse_model_config(m.architecture, "manifest of model '" + m.model + "': architecture");

  m.files = parse_files(r, r.field(j, "files", ""));

  if (sharded) {
    const ShardPlan plan = parse_ranks(r, j, m);
    check_against_plan(r, m, plan);
    return m;
  }
  const json& tensors = r.field(j, "tensors", "");
  if (!tensors.is_array()) r.fail("'tensors' is not an array");
  if (tensors.size() > kMaxTensors)
    r.fail("too many tensors (" + std::to_string(tensors.size()) + ")");
  m.tensors.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) m.tensors.push_back(parse_tensor(r, tensors[i], i));
  check_against_architecture(r, m);
  return m;
}

}  // namespace hearth
