#include "proof/model_identity.h"

#include <algorithm>
#include <stdexcept>

#include "ipc/client.h"
#include "base/digest.h"
#include "weight-server/sharing/checksum.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/sharing/manifest.h"
#include "weight-server/sharing/model_import.h"
#include "tokenizer/tokenizer_loader.h"

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

// One digest of the weights that both modes compute alike: the tensors' xxh3 (the manifest's
// checksum, the 64-bit xxh3 of the bytes as stored) listed by name. Equal digests in a
// single-process and a served report mean the workers ran on the same bytes.
std::string weights_digest(std::vector<std::pair<std::string, std::string>> name_and_xxh3) {
  std::sort(name_and_xxh3.begin(), name_and_xxh3.end());
  std::string listing;
  for (const auto& [name, sum] : name_and_xxh3) listing += name + " " + sum + "\n";
  return to_hex(xxh3_128(listing));
}

json file_entry(std::string_view content) {
  if (content.empty()) return nullptr;
  return {{"bytes", content.size()}, {"xxh3", to_hex(xxh3_128(content))}};
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

  ModelIdentity id;
  json files = json::array();
  std::string listing;
  for (const std::string& name : names) {
    const std::filesystem::path p = dir / name;
    const std::string sum = to_hex(xxh3_128_file(p));
    files.push_back({{"name", name}, {"bytes", std::filesystem::file_size(p)}, {"xxh3", sum}});
    listing += name + " " + sum + "\n";
  }
  // Opening it as the worker does checks the weights too (names, shapes, dtypes).
  const HfModel model = HfModel::open(dir);
  std::vector<std::pair<std::string, std::string>> tensors;
  for (const HfTensor& t : model.tensors())
    tensors.emplace_back(t.info.name, checksum_to_hex(xxh3_checksum(t.data)));
  id.json = {{"mode", "single-process"},
             {"path", std::filesystem::absolute(dir).lexically_normal().string()},
             {"files", files},
             {"files_digest", to_hex(xxh3_128(listing))},
             {"tensors", tensors.size()},
             {"weights_digest", weights_digest(tensors)},
             {"tokenizer", file_entry(model.tokenizer_json())}};
  if (!model.tokenizer_json().empty()) {
    try {
      TokenizerInputs inputs;
      inputs.json = model.tokenizer_json();
      inputs.cache = TokenizerCacheOptions{};
      id.tokenizer = std::move(load_tokenizer(inputs)->tokenizer);
    } catch (const std::exception& e) {
      throw std::runtime_error((dir / "tokenizer.json").string() + ": " + e.what());
    }
  }
  return id;
}

ModelIdentity identify_served_model(const std::string& socket, const std::string& name) {
  FetchedManifest fetched;
  try {
    ipc::ClientOptions options;
    options.name = "hearth-proof";
    ipc::Client client = ipc::Client::connect(socket, options);
    fetched = fetch_manifest(client, name);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot read the manifest of model '" + name +
                             "' from the server at " + socket + ": " + e.what());
  }
  const Manifest& manifest = fetched.manifest;
  const SharedFiles& shared = fetched.files;
  ModelIdentity id;
  std::vector<std::pair<std::string, std::string>> tensors;
  json checksums = json::array();
  for (const ManifestTensor& t : manifest.tensors) {
    tensors.emplace_back(t.info.name, checksum_to_hex(t.xxh3));
    checksums.push_back({{"name", t.info.name}, {"xxh3", checksum_to_hex(t.xxh3)}});
  }
  id.json = {{"mode", "served"},
             {"socket", socket},
             {"name", manifest.model},
             {"backend", manifest.backend},
             {"gpu_uuid", manifest.gpu_uuid.empty() ? json() : json(manifest.gpu_uuid)},
             {"architecture", manifest.architecture},
             {"files",
              {{"tokenizer.json", file_entry(shared.text(kTokenizerJsonFile))},
               {"tokenizer_config.json", file_entry(shared.text(kTokenizerConfigFile))},
               {"generation_config.json", file_entry(shared.text(kGenerationConfigFile))}}},
             {"tensors", tensors.size()},
             {"tensor_bytes", manifest.tensor_bytes()},
             {"tensor_checksums", checksums},
             {"weights_digest", weights_digest(tensors)},
             {"tokenizer", file_entry(shared.text(kTokenizerJsonFile))}};
  if (!shared.text(kTokenizerJsonFile).empty()) {
    try {
      TokenizerInputs inputs;
      inputs.json = shared.text(kTokenizerJsonFile);
      inputs.image = shared.bytes(kTokenizerImageFile);
      inputs.image_owner = shared.owner(kTokenizerImageFile);
      inputs.image_refusal = shared.image_refusal();
      id.tokenizer = std::move(load_tokenizer(inputs)->tokenizer);
    } catch (const std::exception& e) {
      throw std::runtime_error("the tokenizer.json of served model '" + name + "': " + e.what());
    }
  }
  return id;
}

}  // namespace hearth::proof
