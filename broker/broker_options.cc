#include "broker/broker_options.h"

#include <cstdio>

namespace hearth::broker {

void log_to_stderr(std::string_view line) {
  std::fprintf(stderr, "hearth-broker: %.*s\n", static_cast<int>(line.size()), line.data());
}

}  // namespace hearth::broker
