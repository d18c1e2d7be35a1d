#include "server/http_message.h"

#include <strings.h>

namespace serve8 {

bool HttpRequest::has_header(const std::string& name) const {
  for (const auto& [k, v] : headers)
    if (strcasecmp(k.c_str(), name.c_str()) == 0) return true;
  return false;
}

std::string HttpRequest::get_header_value(const std::string& name) const {
  for (const auto& [k, v] : headers)
    if (strcasecmp(k.c_str(), name.c_str()) == 0) return v;
  return {};
}

void Router::add(const std::string& method, const std::string& pattern, Handler h) {
  routes_.push_back({method, std::regex(pattern), std::move(h)});
}

const Handler* Router::find(HttpRequest& req) const {
  for (const Route& r : routes_) {
    if (r.method != req.method) continue;
    std::smatch m;
    if (!std::regex_match(req.path, m, r.pattern)) continue;
    req.matches.assign(m.begin(), m.end());
    return &r.handler;
  }
  return nullptr;
}

}  // namespace serve8
