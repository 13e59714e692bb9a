// The gateway tests' way to look at a refusal: the ApiError a call throws.
#pragma once

#include "gateway/api_error.h"

namespace hearth::gateway {

// The ApiError `f` throws (status 0 when it throws none).
template <typename F>
ApiError error_of(F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(0, "", "no error");
}

}  // namespace hearth::gateway
