#include "gateway/http/router.h"

namespace hearth::http {

void Router::add(const std::string& method, const std::string& path, Handler handler) {
  routes_[path][method] = std::move(handler);
}

Router::Match Router::find(const std::string& method, const std::string& path) const {
  Match m;
  const auto p = routes_.find(path);
  if (p == routes_.end()) {
    m.status = 404;
    return m;
  }
  const auto h = p->second.find(method);
  if (h != p->second.end()) {
    m.handler = &h->second;
    return m;
  }
  m.status = 405;
  for (const auto& [name, _] : p->second) m.allow += (m.allow.empty() ? "" : ", ") + name;
  return m;
}

}  // namespace hearth::http
