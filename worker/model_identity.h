// A model's identity for the prefix cache's domain (worker/engine/cache_domain.h): a string
// that differs whenever the weights' bits may differ, computed without reading the weights.
#pragma once

#include <string>

namespace hearth {

class HfModel;
struct Manifest;

// Served mode: the manifest's config and every tensor's name, dtype, shape and xxh3 checksum
// (the server's checksums of the bytes as stored).
std::string model_identity(const Manifest& manifest);

// Single-process mode: the directory's config.json, every tensor's name, dtype and shape, and
// each safetensors file's path, size and modification time. Hashing the bytes themselves would
// cost seconds for a large model at every start; a file rewritten in place with the same size
// within the clock's resolution is the case this accepts.
std::string model_identity(const HfModel& model);

}  // namespace hearth
