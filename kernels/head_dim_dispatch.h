// The head dims the attention kernels are compiled for, and the one switch that turns a
// runtime head_dim into the matching template argument.
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>

namespace hearth::kernels {

constexpr bool head_dim_supported(int head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}

// Calls launch(std::integral_constant<int, D>{}) for D == head_dim; an unsupported head_dim
// throws "<kernel>: head_dim must be 16, 32, 64 or 128".
template <typename Launch>
void dispatch_head_dim(int head_dim, const char* kernel, Launch&& launch) {
  switch (head_dim) {
    case 16:
      return launch(std::integral_constant<int, 16>{});
    case 32:
      return launch(std::integral_constant<int, 32>{});
    case 64:
      return launch(std::integral_constant<int, 64>{});
    case 128:
      return launch(std::integral_constant<int, 128>{});
    default:
      throw std::runtime_error(std::string(kernel) + ": head_dim must be 16, 32, 64 or 128");
  }
}

}  // namespace hearth::kernels
