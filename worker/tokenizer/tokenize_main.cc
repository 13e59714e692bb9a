// hearth-tokenize: encode JSON strings to token ids, or decode id arrays to strings, one JSON
// value per line on stdin and one per line on stdout. Exits non-zero at the first bad line.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "tokenizer.h"

namespace {

using nlohmann::json;

int fail(size_t line_no, const std::string& message) {
  std::cerr << "hearth-tokenize: line " << line_no << ": " << message << "\n";
  return 1;
}

int run(const hearth::Tokenizer& tokenizer, bool decode, bool add_special, bool skip_special) {
  std::string line;
  size_t line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    json value;
    try {
      value = json::parse(line);
    } catch (const json::parse_error& e) {
      return fail(line_no, std::string("not valid JSON: ") + e.what());
    }
    if (!decode) {
      if (!value.is_string()) return fail(line_no, "expected a JSON string");
      const std::vector<int32_t> ids = tokenizer.encode(value.get<std::string>(), add_special);
      std::cout << json(ids).dump() << '\n' << std::flush;
      continue;
    }
    if (!value.is_array()) return fail(line_no, "expected a JSON array of token ids");
    std::vector<int32_t> ids;
    ids.reserve(value.size());
    for (const json& id : value) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return fail(line_no, "token ids must be integers in [0, 2^31), got " + id.dump());
      }
      ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    // decode() always yields valid UTF-8, so dump() cannot throw on it.
    std::cout << json(tokenizer.decode(ids, skip_special)).dump() << '\n' << std::flush;
  }
  if (std::cin.bad()) {
    std::cerr << "hearth-tokenize: error reading stdin\n";
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Encode text with a Hugging Face tokenizer.json, or decode token ids.\n"
      "Encode: each stdin line is a JSON string; each stdout line is a JSON array of ids.\n"
      "Decode (--decode): each stdin line is a JSON array of ids; each stdout line a string.",
      "hearth-tokenize"};
  std::string path;
  bool decode = false;
  bool add_special = false;
  bool skip_special = false;
  app.add_option("--tokenizer", path, "tokenizer.json, or a model directory containing one")
      ->required();
  app.add_flag("--add-special-tokens", add_special,
               "apply the post-processor template when encoding (e.g. BOS)");
  app.add_flag("--decode", decode, "decode id arrays instead of encoding strings");
  app.add_flag("--skip-special-tokens", skip_special, "drop special tokens when decoding");
  CLI11_PARSE(app, argc, argv);

  try {
    const hearth::Tokenizer tokenizer = hearth::Tokenizer::from_file(path);
    return run(tokenizer, decode, add_special, skip_special);
  } catch (const std::exception& e) {
    std::cerr << "hearth-tokenize: " << e.what() << "\n";
    return 1;
  }
}
