// Why a request was refused: the status to answer with and a message naming what is wrong.
#pragma once

#include <string>

namespace hearth::http {

struct ParseError {
  int status = 0;  // 400, 413, 414, 431, 501, 505
  std::string message;
};

}  // namespace hearth::http
