#include "worker/model_identity.h"

#include <xxhash.h>

#include <cstdio>
#include <filesystem>
#include <set>

#include "weight-server/model/hf_model.h"
#include "weight-server/sharing/manifest.h"

namespace hearth {

namespace {

std::string hex128(const std::string& text) {
  const XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return buf;
}

std::string describe(const TensorInfo& t) {
  return t.name + " " + std::string(dtype_name(t.dtype)) + " " + t.shape_string() + "\n";
}

}  // namespace

std::string model_identity(const Manifest& manifest) {
  std::string text = "served\n" + manifest.architecture.dump() + "\n";
  for (const ManifestTensor& t : manifest.tensors)
    text += describe(t.info) + std::to_string(t.xxh3) + "\n";
  return "served:" + hex128(text);
}

std::string model_identity(const HfModel& model) {
  namespace fs = std::filesystem;
  std::string text = "dir\n" + model.config_json() + "\n";
  std::set<std::string> shards;
  for (const HfTensor& t : model.tensors()) {
    text += describe(t.info);
    shards.insert(t.shard);
  }
  for (const std::string& shard : shards) {
    const fs::path path = fs::absolute(model.dir() / shard);
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    const auto mtime = fs::last_write_time(path, ec).time_since_epoch().count();
    text += path.string() + " " + std::to_string(size) + " " + std::to_string(mtime) + "\n";
  }
  return "dir:" + hex128(text);
}

}  // namespace hearth
