#include "proof/model_identity.h"

#include <algorithm>
#include <stdexcept>

#include "ipc/client.h"
#include "proof/checksum.h"

namespace hearth::proof {

using json = nlohmann::json;

namespace {

bool shapes_output(const std::string& name) {
  static const char* const exact[] = {"config.json", "generation_config.json", "tokenizer.json",
                                      "tokenizer_config.json", "special_tokens_map.json"};
  for (const char* e : exact)
    if (name == e) return true;
  return name.ends_with(".safetensors") || name.ends_with(".safetensors.index.json");
}

// Inline file contents (a tokenizer.json is megabytes) would swamp the report: a long string
// is replaced by its size and checksum, everything else is kept as the server sent it.
json summarize(const json& v) {
  constexpr size_t kKeepBytes = 1024;
  if (v.is_string() && v.get_ref<const std::string&>().size() > kKeepBytes) {
    const std::string& s = v.get_ref<const std::string&>();
    return {{"bytes", s.size()}, {"xxh3", xxh3_bytes(s)}};
  }
  if (v.is_object()) {
    json out = json::object();
    for (const auto& [k, item] : v.items()) out[k] = summarize(item);
    return out;
  }
  if (v.is_array()) {
    json out = json::array();
    for (const json& item : v) out.push_back(summarize(item));
    return out;
  }
  return v;
}

// The manifest carries the tokenizer files inline; their exact key is the server's business,
// so any string under a key naming a tokenizer file that loads as one is taken.
std::optional<Tokenizer> find_tokenizer(const json& v, int depth) {
  if (depth > 3 || !v.is_object()) return std::nullopt;
  for (const auto& [key, item] : v.items()) {
    const bool named = key.find("tokenizer") != std::string::npos && key.find("config") == std::string::npos;
    if (named && item.is_string()) {
      try {
        return Tokenizer::from_json(item.get_ref<const std::string&>());
      } catch (const std::exception&) {
        // not a tokenizer.json after all
      }
    }
    if (auto t = find_tokenizer(item, depth + 1)) return t;
  }
  return std::nullopt;
}

// Over the tensors' names and checksums when the manifest lists them, so two servers of the
// same weights agree whatever their sockets, devices or allocation ids; else over all of it.
std::string manifest_digest(const json& manifest) {
  const json* tensors = manifest.contains("tensors") ? &manifest["tensors"] : nullptr;
  if (!tensors && manifest.contains("manifest") && manifest["manifest"].contains("tensors"))
    tensors = &manifest["manifest"]["tensors"];
  std::string listing;
  if (tensors && tensors->is_array()) {
    for (const json& t : *tensors) {
      if (!t.is_object() || !t.contains("name") || !t.contains("checksum")) return xxh3_bytes(manifest.dump());
      listing += t["name"].dump() + " " + t["checksum"].dump() + "\n";
    }
    if (!listing.empty()) return xxh3_bytes(listing);
  }
  return xxh3_bytes(manifest.dump());
}

}  // namespace

ModelIdentity identify_model_dir(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir))
    throw std::runtime_error(dir.string() + ": no such model directory");
  if (!std::filesystem::is_regular_file(dir / "config.json"))
    throw std::runtime_error(dir.string() + ": not a model directory (no config.json)");
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && shapes_output(name)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  if (std::none_of(names.begin(), names.end(), [](const std::string& n) { return n.ends_with(".safetensors"); }))
    throw std::runtime_error(dir.string() + ": no .safetensors weights");

  ModelIdentity id;
  json files = json::array();
  std::string listing;
  for (const std::string& name : names) {
    const std::filesystem::path p = dir / name;
    const std::string sum = xxh3_file(p);
    files.push_back({{"name", name}, {"bytes", std::filesystem::file_size(p)}, {"xxh3", sum}});
    listing += name + " " + sum + "\n";
  }
  id.json = {{"mode", "single-process"},
             {"path", std::filesystem::absolute(dir).lexically_normal().string()},
             {"files", files},
             {"digest", xxh3_bytes(listing)}};
  if (std::filesystem::is_regular_file(dir / "tokenizer.json")) {
    try {
      id.tokenizer = Tokenizer::from_file(dir);
    } catch (const std::exception& e) {
      throw std::runtime_error((dir / "tokenizer.json").string() + ": " + e.what());
    }
  }
  return id;
}

ModelIdentity identify_served_model(const std::string& socket, const std::string& name) {
  json manifest;
  try {
    ipc::ClientOptions options;
    options.name = "hearth-proof";
    ipc::Client client = ipc::Client::connect(socket, options);
    manifest = client.call(ipc::op::kManifest, {{"model", name}}).body;
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot read the manifest of model '" + name + "' from the server at " +
                             socket + ": " + e.what());
  }
  manifest.erase("id");
  manifest.erase("ok");
  ModelIdentity id;
  id.tokenizer = find_tokenizer(manifest, 0);
  id.json = {{"mode", "served"},
             {"socket", socket},
             {"name", name},
             {"manifest", summarize(manifest)},
             {"digest", manifest_digest(manifest)}};
  return id;
}

}  // namespace hearth::proof
