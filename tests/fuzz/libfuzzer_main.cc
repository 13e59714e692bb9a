// libFuzzer's entry point for one target, chosen at compile time (HEARTH_FUZZ_TARGET_NAME). A
// refused input is fine; FuzzBug or any other escaping exception aborts, which libFuzzer reports.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "tests/fuzz/fuzz_targets.h"
#include "tests/fuzz/http_request_target.h"

namespace {

bool run(std::string_view data) {
  using namespace hearth::fuzz;
  const std::string_view target = HEARTH_FUZZ_TARGET_NAME;
  if (target == "config") return config_json(data);
  if (target == "tokenizer") return tokenizer_json(data);
  if (target == "safetensors") return safetensors(data);
  if (target == "http_request") return http_request(data);
  if (target == "gateway_request") return gateway_request(data);
  if (target == "serve") return serve_request(data);
  return profile_json(data);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    run(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz bug: %s\n", e.what());
    std::abort();
  }
  return 0;
}
