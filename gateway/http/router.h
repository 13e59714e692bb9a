// Routes by method: exact paths, and prefixes written with a trailing '*' ("/v1/models/*"
// matches "/v1/models/" followed by at least one byte; the handler reads the rest from the
// request's path). An exact path wins over a prefix, a longer prefix over a shorter. A known
// path asked with another method is 405 with the methods it has (Allow), an unknown path 404.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "gateway/http/message.h"

namespace hearth::http {

using Handler = std::function<void(const Request&, Response&)>;

class Router {
 public:
  void add(const std::string& method, const std::string& path, Handler handler);

  struct Match {
    const Handler* handler = nullptr;  // null: status says why
    int status = 0;                    // 404 or 405
    std::string allow;                 // for 405: "GET, POST"
  };
  Match find(const std::string& method, const std::string& path) const;

 private:
  std::map<std::string, std::map<std::string, Handler>> routes_;    // path -> method -> handler
  std::map<std::string, std::map<std::string, Handler>> prefixes_;  // prefix (no '*') -> ...
};

}  // namespace hearth::http
