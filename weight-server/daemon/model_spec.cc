#include "weight-server/daemon/model_spec.h"

#include <stdexcept>

namespace hearth {

std::string default_model_name(const std::filesystem::path& dir) {
  if (dir.empty()) return "";  // std::filesystem::absolute throws on it; no name is invalid
  const std::filesystem::path p = std::filesystem::absolute(dir).lexically_normal();
  std::string name = p.filename().string();
  if (name.empty()) name = p.parent_path().filename().string();  // "dir/" has an empty filename
  return name;
}

bool valid_model_name(std::string_view name) {
  if (name.empty() || name.size() > 128 || name[0] == '.' || name[0] == '-') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

void check_model_name(std::string_view name) {
  if (!valid_model_name(name))
    throw std::runtime_error("'" + std::string(name) +
                             "' is not a valid model name (1-128 letters, digits, '.', '_' or '-', "
                             "not starting with '.' or '-')");
}

ModelSpec parse_model_spec(std::string_view text) {
  if (text.empty()) throw std::runtime_error("empty model directory");
  ModelSpec spec;
  const size_t colon = text.rfind(':');
  if (colon != std::string_view::npos && text.find('/', colon) == std::string_view::npos) {
    spec.dir = std::string(text.substr(0, colon));
    spec.name = std::string(text.substr(colon + 1));
    if (spec.dir.empty())
      throw std::runtime_error("'" + std::string(text) + "': no directory before ':'");
  } else {
    spec.dir = std::string(text);
    spec.name = default_model_name(spec.dir);
  }
  check_model_name(spec.name);
  return spec;
}

}  // namespace hearth
