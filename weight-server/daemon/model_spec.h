// How a served model is named on the command line and in admin `load` requests: a directory,
// optionally followed by ":NAME"; without a name, the directory's basename.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace hearth {

struct ModelSpec {
  std::filesystem::path dir;
  std::string name;
};

// "DIR" or "DIR:NAME". A ':' followed by something that cannot be a name (it holds a '/') is
// part of the directory. Throws std::runtime_error for an invalid name.
ModelSpec parse_model_spec(std::string_view text);

// The name a directory is served under by default: its basename, "." and ".." resolved.
std::string default_model_name(const std::filesystem::path& dir);

// Names are what workers type: 1-128 of [A-Za-z0-9._-], not starting with '.' or '-'.
bool valid_model_name(std::string_view name);
// Throws std::runtime_error explaining the rule when `name` breaks it.
void check_model_name(std::string_view name);

}  // namespace hearth
