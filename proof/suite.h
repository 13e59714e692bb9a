// A proof suite: the prompts every profile is run over, read from a JSONL file with one object
// per line: {"id": ..., "prompt": "..." | "prompt_tokens": [...], "max_tokens": N, "meta": {...}}.
// Everything is checked when the file is loaded, before any worker starts.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hearth::proof {

struct SuitePrompt {
  std::string id;                   // unique within the suite
  std::optional<std::string> text;  // the prompt as text (the worker tokenizes it)...
  std::vector<int32_t> tokens;      // ...or as token ids, used exactly
  std::optional<int> max_tokens;    // this prompt's own cap, if any
  nlohmann::json meta;              // free-form notes (source, language), copied to reports
  size_t line = 0;                  // where it is in the file, for messages
};

struct Suite {
  std::filesystem::path path;
  std::string name;      // the file's stem
  std::string checksum;  // xxh3 of the file: reports of different suites are never compared
  std::vector<SuitePrompt> prompts;
};

// A prompt travels to the worker as one argv string, which Linux caps at 128 KiB; this leaves
// room for the terminating NUL and keeps a clear message instead of an E2BIG from exec.
inline constexpr size_t kMaxPromptArgBytes = 100 * 1024;

// Reads and validates `path`. Throws std::runtime_error "PATH:LINE: what is wrong" on the first
// problem: unreadable file, invalid JSON, unknown or mistyped key, missing or duplicate id,
// both or neither of prompt/prompt_tokens, an empty or oversized prompt, a bad max_tokens, or
// no prompts at all.
Suite load_suite(const std::filesystem::path& path);

// The worker's token limit for `prompt`: the smaller of its own max_tokens and the budget,
// or nullopt when neither is set (the profile's max_tokens then applies).
std::optional<int> token_limit(const SuitePrompt& prompt, std::optional<int> budget);

}  // namespace hearth::proof
