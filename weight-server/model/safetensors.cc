#include "weight-server/model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "base/json_limits.h"

namespace hearth {

using json = nlohmann::json;

uint64_t TensorInfo::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

[[noreturn]] void fail(const std::string& label, const std::string& what) {
  throw std::runtime_error(label + ": " + what);
}

[[noreturn]] void fail_tensor(const std::string& label, const std::string& tensor,
                              const std::string& what) {
  fail(label, "tensor '" + tensor + "': " + what);
}

// "must be EXPECTED, got TYPE VALUE": a present field of the wrong type is not a missing one.
std::string must_be(const std::string& expected, const json& got) {
  return "must be " + expected + ", got " + got.type_name() + " " + json_excerpt(got, 40);
}

uint64_t read_u64_le(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | std::to_integer<uint64_t>(p[i]);
  return v;
}

// Parses the JSON header, refusing duplicate keys, which nlohmann would silently overwrite.
json parse_header_json(std::string_view text, const std::string& label) {
  std::set<std::string> top_level_keys;
  std::string duplicate;
  auto reject_duplicates = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 &&
        !top_level_keys.insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json header = parse_json(text, label + ": header", kMaxJsonDepth, reject_duplicates);
  if (!duplicate.empty()) fail_tensor(label, duplicate, "appears twice in the header");
  if (!header.is_object()) fail(label, "header is not a JSON object");
  return header;
}

TensorInfo parse_tensor_info(const std::string& name, const json& desc, const std::string& label,
                             uint64_t& begin, uint64_t& end) {
  if (!desc.is_object()) fail_tensor(label, name, "description is not an object");
  for (const auto& [key, _] : desc.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      fail_tensor(label, name, "unexpected field '" + key + "'");
  }
  TensorInfo info;
  info.name = name;

  auto dtype_it = desc.find("dtype");
  if (dtype_it == desc.end()) fail_tensor(label, name, "missing dtype");
  if (!dtype_it->is_string()) fail_tensor(label, name, "dtype " + must_be("a string", *dtype_it));
  auto dtype = parse_dtype(dtype_it->get<std::string>());
  if (!dtype)
    fail_tensor(label, name,
                "unsupported dtype " + dtype_it->get<std::string>() +
                    " (supported: F32, F16, BF16, F8_E4M3)");
  info.dtype = *dtype;

  auto shape_it = desc.find("shape");
  if (shape_it == desc.end()) fail_tensor(label, name, "missing shape");
  if (!shape_it->is_array()) fail_tensor(label, name, "shape " + must_be("an array", *shape_it));
  uint64_t numel = 1;
  for (const json& d : *shape_it) {
    if (!d.is_number_unsigned())
      fail_tensor(label, name, "shape entries " + must_be("integers >= 0", d));
    uint64_t dim = d.get<uint64_t>();
    if (dim > uint64_t(std::numeric_limits<int64_t>::max()) ||
        (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / dim))
      fail_tensor(label, name, "shape overflows");
    numel *= dim;
    info.shape.push_back(static_cast<int64_t>(dim));
  }
  if (numel > std::numeric_limits<uint64_t>::max() / dtype_size(info.dtype))
    fail_tensor(label, name, "shape overflows");
  info.bytes = numel * dtype_size(info.dtype);

  auto off_it = desc.find("data_offsets");
  if (off_it == desc.end() || !off_it->is_array() || off_it->size() != 2 ||
      !(*off_it)[0].is_number_unsigned() || !(*off_it)[1].is_number_unsigned())
    fail_tensor(label, name, "data_offsets must be [begin, end] with integers >= 0");
  begin = (*off_it)[0].get<uint64_t>();
  end = (*off_it)[1].get<uint64_t>();
  if (end < begin) fail_tensor(label, name, "data_offsets end before begin");
  if (end - begin != info.bytes)
    fail_tensor(label, name,
                "byte size disagrees with dtype and shape: " + info.shape_string() + " " +
                    std::string(dtype_name(info.dtype)) + " needs " + std::to_string(info.bytes) +
                    " bytes, offsets give " + std::to_string(end - begin));
  return info;
}

}  // namespace

SafetensorsHeader parse_safetensors_tensors(std::span<const std::byte> file,
                                            const std::string& label) {
  if (file.size() < 8)
    fail(label, "too short for a safetensors file (" + std::to_string(file.size()) + " bytes)");
  uint64_t header_len = read_u64_le(file.data());
  if (header_len < 2) fail(label, "header length " + std::to_string(header_len) + " is too small");
  if (header_len > kMaxSafetensorsHeaderBytes)
    fail(label, "header length " + std::to_string(header_len) + " exceeds the limit of " +
                    std::to_string(kMaxSafetensorsHeaderBytes));
  if (header_len > file.size() - 8)
    fail(label, "header length " + std::to_string(header_len) + " runs past the end of the file (" +
                    std::to_string(file.size()) + " bytes)");

  std::string_view text(reinterpret_cast<const char*>(file.data() + 8), header_len);
  json header = parse_header_json(text, label);

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file.size() - data_start;
  SafetensorsHeader result;
  result.data_start = data_start;
  result.data_size = data_size;
  for (const auto& [name, desc] : header.items()) {
    if (name == "__metadata__") {
      if (!desc.is_object()) fail(label, "__metadata__ is not an object");
      for (const auto& [k, v] : desc.items()) {
        if (!v.is_string()) fail(label, "__metadata__ value for '" + k + "' is not a string");
        result.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    uint64_t begin = 0, end = 0;
    TensorInfo info = parse_tensor_info(name, desc, label, begin, end);
    if (end > data_size)
      fail_tensor(label, name,
                  "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                      ") run past the end of the data (" + std::to_string(data_size) + " bytes)");
    if ((data_start + begin) % dtype_size(info.dtype) != 0)
      fail_tensor(label, name, "data is not aligned to its element size");
    result.tensors.push_back({std::move(info), data_start + begin});
  }

  return result;
}

void check_safetensors_layout(const SafetensorsHeader& header, const std::string& label) {
  struct Range {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Range> ranges;
  ranges.reserve(header.tensors.size());
  for (size_t i = 0; i < header.tensors.size(); ++i) {
    const SafetensorsEntry& e = header.tensors[i];
    const uint64_t begin = e.file_offset - header.data_start;
    ranges.push_back({begin, begin + e.info.bytes, i});
  }
  // Tensors must tile the data region exactly, as the reference implementation requires:
  // overlapping tensors would alias, and gaps hide unaccounted bytes.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  for (const Range& r : ranges) {
    const std::string& name = header.tensors[r.index].info.name;
    if (r.begin < cursor) fail_tensor(label, name, "data overlaps another tensor");
    if (r.begin > cursor)
      fail_tensor(
          label, name,
          "gap of " + std::to_string(r.begin - cursor) + " unaccounted bytes before this tensor");
    cursor = r.end;
  }
  if (cursor != header.data_size)
    fail(label,
         std::to_string(header.data_size - cursor) + " trailing bytes after the last tensor");
}

SafetensorsHeader parse_safetensors(std::span<const std::byte> file, const std::string& label) {
  SafetensorsHeader header = parse_safetensors_tensors(file, label);
  check_safetensors_layout(header, label);
  return header;
}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.mapping_ = MappedFile::open(path);
  f.header_ = parse_safetensors(f.mapping_.bytes(), path.string());
  return f;
}

SafetensorsFile SafetensorsFile::open(int fd, const std::filesystem::path& path, Layout layout) {
  SafetensorsFile f;
  f.path_ = path;
  f.mapping_ = MappedFile::map_file(fd, path);
  f.header_ = parse_safetensors_tensors(f.mapping_.bytes(), path.string());
  if (layout == Layout::kCheck) f.check_layout();
  return f;
}

void SafetensorsFile::check_layout() const {
  check_safetensors_layout(header_, path_.string());
}

}  // namespace hearth
