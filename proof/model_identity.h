// Which weights a proof run used, for the report, and the tokenizer that goes with them.
// Single-process mode: the xxh3 of every file of the model directory that shapes the output
// (config, generation config, tokenizer files, safetensors and their index). Served mode: the
// server's manifest, as it reports it (per-tensor checksums included), fetched over the socket.
// Each identity carries one `digest` so two reports of the same mode can be matched at a glance.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "worker/tokenizer/tokenizer.h"

namespace hearth::proof {

struct ModelIdentity {
  nlohmann::json json;                 // goes into report.json as "model"
  std::optional<Tokenizer> tokenizer;  // for the text contract, when the model has one
};

// Throws std::runtime_error when the directory is missing, has no config.json or weights, or
// has a tokenizer.json that does not load.
ModelIdentity identify_model_dir(const std::filesystem::path& dir);

// Throws std::runtime_error when the server cannot be reached or does not serve `name`.
ModelIdentity identify_served_model(const std::string& socket, const std::string& name);

}  // namespace hearth::proof
