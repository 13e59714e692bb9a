#include "worker/prompt_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "base/read_file.h"

namespace hearth {
namespace {

std::string read_stdin() {
  std::string text;
  char chunk[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
    if (n == 0) return text;
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("--prompt-file -: cannot read stdin: ") +
                               std::strerror(errno));
    }
    if (text.size() + size_t(n) > kMaxPromptBytes)
      throw std::runtime_error("--prompt-file -: stdin holds more than " +
                               std::to_string(kMaxPromptBytes >> 20) + " MiB");
    text.append(chunk, size_t(n));
  }
}

}  // namespace

std::string read_prompt_file(const std::string& path) {
  if (path == "-") return read_stdin();
  return read_file(path, kMaxPromptBytes);
}

}  // namespace hearth
