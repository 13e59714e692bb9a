// Which weights a proof run used, for the report, and the tokenizer that goes with them.
// Single-process mode: the xxh3 of every file of the model directory that shapes the output
// (config, generation config, tokenizer files, safetensors and their index). Served mode: the
// server's manifest (backend, GPU, per-tensor checksums), fetched over the socket. Both carry
// `weights_digest`, computed alike from per-tensor checksums, so a served and a single-process
// report show at a glance whether their workers ran on the same bytes.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace hearth::proof {

struct ModelIdentity {
  nlohmann::json json;                 // goes into report.json as "model"
  std::optional<Tokenizer> tokenizer;  // for the text contract, when the model has one
};

// Throws std::runtime_error when the directory is missing, is not a model the engine can open,
// or has a tokenizer.json that does not load.
ModelIdentity identify_model_dir(const std::filesystem::path& dir);

// Throws std::runtime_error when the server cannot be reached or does not serve `name`.
ModelIdentity identify_served_model(const std::string& socket, const std::string& name);

}  // namespace hearth::proof
