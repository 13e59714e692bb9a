#include "gateway/http/router.h"

namespace hearth::http {

void Router::add(const std::string& method, const std::string& path, Handler handler) {
  if (!path.empty() && path.back() == '*')
    prefixes_[path.substr(0, path.size() - 1)][method] = std::move(handler);
  else
    routes_[path][method] = std::move(handler);
}

Router::Match Router::find(const std::string& method, const std::string& path) const {
  Match m;
  auto p = routes_.find(path);
  if (p == routes_.end()) {
    // The longest prefix that leaves something after it.
    p = prefixes_.end();
    for (auto it = prefixes_.begin(); it != prefixes_.end(); ++it)
      if (path.size() > it->first.size() && path.starts_with(it->first) &&
          (p == prefixes_.end() || it->first.size() > p->first.size()))
        p = it;
    if (p == prefixes_.end()) {
      m.status = 404;
      return m;
    }
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
