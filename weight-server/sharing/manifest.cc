#include "weight-server/sharing/manifest.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include "ipc/json_limits.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/sharing/checksum.h"

namespace hearth {

namespace {

using json = nlohmann::json;

// Bounds that no real model comes near; they keep a hostile manifest from making the worker
// allocate or loop without end before the tensor list is compared with the architecture.
constexpr size_t kMaxTensors = 1 << 20;
constexpr size_t kMaxDims = 8;
constexpr uint64_t kMaxAllocationBytes = uint64_t{1} << 44;

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

  const json& field(const json& object, const char* key, const std::string& where) const {
    const auto it = object.find(key);
    if (it == object.end()) fail(where + "has no '" + key + "'");
    return *it;
  }
  std::string string(const json& object, const char* key, const std::string& where = "") const {
    const json& v = field(object, key, where);
    if (!v.is_string()) fail(where + "'" + key + "' is not a string");
    return v.get<std::string>();
  }
  uint64_t unsigned_int(const json& object, const char* key, const std::string& where = "") const {
    const json& v = field(object, key, where);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      fail(where + "'" + key + "' is not a non-negative integer");
    return v.get<uint64_t>();
  }
  // A file's content, or "" when the field is absent or null. The worker parses it later, so
  // its depth is bounded like any other JSON's.
  std::string optional_text(const json& files, const char* key) const {
    const auto it = files.find(key);
    if (it == files.end() || it->is_null()) return "";
    if (!it->is_string()) fail("files['" + std::string(key) + "'] is not a string");
    try {
      check_json_depth(it->get_ref<const std::string&>(), std::string("files['") + key + "']");
    } catch (const JsonError& e) {
      fail(e.what());
    }
    return it->get<std::string>();
  }
};

ManifestTensor parse_tensor(const Reader& r, const json& t, size_t index) {
  std::string where = "tensors[" + std::to_string(index) + "]: ";
  if (!t.is_object()) r.fail(where + "not an object");
  ManifestTensor out;
  out.info.name = r.string(t, "name", where);
  if (out.info.name.empty()) r.fail(where + "empty name");
  where = "tensor '" + out.info.name + "': ";
  const std::string dtype = r.string(t, "dtype", where);
  const auto parsed = parse_dtype(dtype);
  if (!parsed) r.fail(where + "unsupported dtype '" + dtype + "' (F32, F16 or BF16)");
  out.info.dtype = *parsed;
  const json& shape = r.field(t, "shape", where);
  if (!shape.is_array() || shape.size() > kMaxDims)
    r.fail(where + "'shape' is not an array of at most " + std::to_string(kMaxDims) + " sizes");
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
    if (got.shape != want.shape) {
      const TensorInfo expected{want.name, got.dtype, want.shape, 0};
      r.fail("tensor '" + want.name + "' has shape " + got.shape_string() +
             ", the architecture implies " + expected.shape_string());
    }
    by_name.erase(it);
  }
  if (!by_name.empty())
    r.fail("unexpected tensor '" + by_name.begin()->first + "' for " + m.config.architecture_name);
}

// Measured as encoded, escapes included, when the server builds the manifest at load.
void check_fits_in_a_reply(const Manifest& m, const json& j) {
  size_t bytes = 0;
  try {
    bytes = j.dump().size();
  } catch (const json::exception& e) {
    throw std::runtime_error("manifest of model '" + m.model + "' cannot be encoded: " + e.what());
  }
  if (bytes <= kMaxManifestBytes) return;
  const std::pair<const char*, size_t> files[] = {
      {"tokenizer.json", m.tokenizer_json.size()},
      {"tokenizer_config.json", m.tokenizer_config_json.size()},
      {"generation_config.json", m.generation_config_json.size()}};
  const auto largest = *std::max_element(std::begin(files), std::end(files),
                                         [](auto a, auto b) { return a.second < b.second; });
  throw std::runtime_error("model '" + m.model + "': its manifest would be " +
                           std::to_string(bytes) + " bytes, more than the " +
                           std::to_string(kMaxManifestBytes) + " a reply can carry to a worker (" +
                           largest.first + " is " + std::to_string(largest.second) + " bytes)");
}

}  // namespace

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

std::vector<uint64_t> Manifest::allocation_ids() const {
  std::vector<uint64_t> ids;
  ids.reserve(tensors.size());
  for (const ManifestTensor& t : tensors) ids.push_back(t.allocation);
  return ids;
}

json manifest_to_json(const Manifest& m) {
  json tensors = json::array();
  for (const ManifestTensor& t : m.tensors) {
    tensors.push_back({{"name", t.info.name},
                       {"dtype", std::string(dtype_name(t.info.dtype))},
                       {"shape", t.info.shape},
                       {"bytes", t.info.bytes},
                       {"allocation_bytes", t.allocation_bytes},
                       {"allocation", t.allocation},
                       {"xxh3", checksum_to_hex(t.xxh3)}});
  }
  auto text = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  json j = {{"format", kManifestFormat},
            {"version", kManifestVersion},
            {"model", m.model},
            {"backend", m.backend},
            {"gpu_uuid", text(m.gpu_uuid)},
            {"architecture", m.architecture},
            {"files",
             {{"tokenizer.json", text(m.tokenizer_json)},
              {"tokenizer_config.json", text(m.tokenizer_config_json)},
              {"generation_config.json", text(m.generation_config_json)}}},
            {"tensor_bytes", m.tensor_bytes()},
            {"allocation_bytes", m.allocation_bytes()},
            {"tensors", std::move(tensors)}};
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
  if (!version.is_number_integer() || version.get<int64_t>() != kManifestVersion)
    r.fail("version " + json_excerpt(version) + " is not supported (this build reads version " +
           std::to_string(kManifestVersion) + ")");

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

  const json& files = r.field(j, "files", "");
  if (!files.is_object()) r.fail("'files' is not an object");
  m.tokenizer_json = r.optional_text(files, "tokenizer.json");
  m.tokenizer_config_json = r.optional_text(files, "tokenizer_config.json");
  m.generation_config_json = r.optional_text(files, "generation_config.json");

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
