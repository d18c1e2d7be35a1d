// The server's view of HTTP, independent of the library that speaks it: a parsed request, the
// response a route fills in (whole, or deferred: written as it becomes ready), and the router
// that maps method and path to a route. Internal to server/.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

namespace serve8 {

struct HttpRequest {
  std::string method;  // GET, POST, ...
  std::string path;    // the target without its query
  std::string body;
  std::string remote_addr;
  std::vector<std::pair<std::string, std::string>> headers;
  std::vector<std::string> matches;  // the route pattern's groups; [0] is the whole path

  bool has_header(const std::string& name) const;
  std::string get_header_value(const std::string& name) const;  // "" when absent
};

// A response written piece by piece as it becomes ready (server-sent events, or a body that waits
// for the engine). The connection calls next() whenever the wake-up it registered fires, and at
// least every 50 ms; next() never blocks.
class DeferredResponse {
 public:
  struct Head {
    int status = 200;
    std::string content_type;
    std::vector<std::pair<std::string, std::string>> headers;
    bool chunked = false;  // else the whole body comes with done
  };
  struct Piece {
    std::optional<Head> head;  // first, exactly once
    std::string data;
    bool done = false;  // nothing follows
  };
  virtual ~DeferredResponse() = default;
  // Registers the wake-up (callable from any thread, any number of times); called once, first.
  virtual void start(std::function<void()> wake) = 0;
  virtual Piece next() = 0;
  // The client went away, a write failed or the server is closing: abort what still runs.
  virtual void cancel() = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  std::shared_ptr<DeferredResponse> deferred;  // set: status, body and content_type come from it

  void set_header(const std::string& name, const std::string& value) { headers.emplace_back(name, value); }
  void set_content(std::string b, std::string type) {
    body = std::move(b);
    content_type = std::move(type);
  }
};

using Handler = std::function<void(const HttpRequest&, HttpResponse&)>;

// Routes by method and a pattern matched against the whole path (an ECMAScript regex; a plain
// path matches itself), first registered first.
class Router {
 public:
  void Get(const std::string& pattern, Handler h) { add("GET", pattern, std::move(h)); }
  void Post(const std::string& pattern, Handler h) { add("POST", pattern, std::move(h)); }
  void Options(const std::string& pattern, Handler h) { add("OPTIONS", pattern, std::move(h)); }
  // The handler for req (filling req.matches), or nullptr when no route takes it.
  const Handler* find(HttpRequest& req) const;

 private:
  struct Route {
    std::string method;
    std::regex pattern;
    Handler handler;
  };
  void add(const std::string& method, const std::string& pattern, Handler h);
  std::vector<Route> routes_;
};

}  // namespace serve8
