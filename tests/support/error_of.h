// What a refusal says: the message of the exception `fn` throws, or "(no error)" when it throws
// none, for tests that assert a refusal names its cause.
#pragma once

#include <exception>
#include <functional>
#include <string>

namespace hearth::test {

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace hearth::test
