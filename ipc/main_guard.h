// One shape for every binary's main(): an exception that escapes the program becomes one line
// on stderr, "PROGRAM: error: WHAT", and an exit status (1 unless the program has its own, as
// hearth-proof's 2 for "could not run").
#pragma once

#include <cstdio>
#include <exception>

namespace hearth {

template <class Program>
int run_main(const char* program_name, Program&& program, int failure_status = 1) {
  try {
    return program();
  } catch (const std::exception& e) {
    std::fflush(stdout);  // what the program printed comes before its error in a shared terminal
    std::fprintf(stderr, "%s: error: %s\n", program_name, e.what());
    return failure_status;
  }
}

}  // namespace hearth
