#include "server/http_session.h"

#include <sys/socket.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>

#include "core/log.h"
#include "server/api_error.h"
#include "server/json_params.h"

namespace serve8 {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;

namespace {

constexpr size_t kHeaderLimit = 64 * 1024;
// How often a connection with a deferred response checks that its client is still there.
constexpr auto kTick = std::chrono::milliseconds(50);

std::string chunk(const std::string& data) { return fmt::format("{:x}\r\n", data.size()) + data + "\r\n"; }

}  // namespace

HttpSession::HttpSession(net::ip::tcp::socket socket, SessionHost& host)
    : stream_(std::move(socket)), ticker_(stream_.get_executor()), host_(host) {
  boost::system::error_code ec;
  const auto ep = stream_.socket().remote_endpoint(ec);
  if (!ec) remote_ = fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

void HttpSession::start() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_request(); });
}

void HttpSession::close_if_idle() {
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    if (!self->busy_) self->close_now();
  });
}

void HttpSession::close() {
  net::post(stream_.get_executor(), [self = shared_from_this()] { self->close_now(); });
}

void HttpSession::close_now() {
  if (closed_) return;
  closed_ = true;
  ticker_.cancel();
  if (deferred_) {
    deferred_->cancel();
    deferred_.reset();
  }
  beast::error_code ec;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
  stream_.close();
}

void HttpSession::read_request() {
  busy_ = false;
  if (closed_) return;
  if (host_.closing()) return close_now();
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  parser_->body_limit(host_.options().max_request_bytes);
  // One deadline for the idle wait and the whole header: a client trickling bytes gains nothing.
  stream_.expires_after(std::chrono::seconds(host_.options().http_timeout_seconds));
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

void HttpSession::on_header(beast::error_code ec) {
  if (ec) return on_read_error(ec);
  if (parser_->is_done()) return dispatch();
  if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
    auto cont = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
    net::async_write(stream_, net::buffer(*cont), [self = shared_from_this(), cont](beast::error_code wec, size_t) {
      if (wec) return self->close_now();
      self->read_body();
    });
    return;
  }
  read_body();
}

void HttpSession::read_body() {
  stream_.expires_after(std::chrono::seconds(host_.options().http_timeout_seconds));
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
}

void HttpSession::on_body(beast::error_code ec) {
  if (ec) return on_read_error(ec);
  dispatch();
}

void HttpSession::on_read_error(beast::error_code ec) {
  // The body limit holds while reading, announced or chunked: 413 at once, then close.
  if (ec == http::error::body_limit) {
    host_.rejected();
    return write_error(413, "The request body is too large (see --max-request-bytes)", "request_too_large");
  }
  if (ec == http::error::header_limit) {
    host_.rejected();
    return write_error(431, "The request's header fields are too large", "header_too_large");
  }
  const bool started = parser_ && parser_->got_some();
  if (started && ec.category() == http::make_error_code(http::error::bad_target).category() &&
      ec != http::error::end_of_stream && ec != http::error::partial_message) {
    host_.rejected();
    return write_error(400, "Malformed HTTP request: " + ec.message(), "bad_request");
  }
  close_now();  // end of stream, timeout, reset or a message cut short: nobody to answer
}

void HttpSession::dispatch() {
  auto& m = parser_->get();
  HttpRequest req;
  req.method = std::string(m.method_string());
  const std::string target(m.target());
  req.path = target.substr(0, target.find('?'));
  for (const auto& f : m) req.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  req.body = std::move(m.body());
  req.remote_addr = remote_;
  keep_alive_ = m.keep_alive();
  http11_ = m.version() >= 11;
  busy_ = true;
  stream_.expires_never();
  host_.run_handler([self = shared_from_this(), req = std::move(req)]() mutable {
    HttpResponse res = self->host_.handle(req);
    spdlog::debug("{} {} {} -> {}", req.remote_addr, req.method, req.path, res.deferred ? 0 : res.status);
    net::post(self->stream_.get_executor(),
              [self, res = std::move(res)]() mutable { self->respond(std::move(res)); });
  });
}

void HttpSession::respond(HttpResponse res) {
  if (closed_) {
    if (res.deferred) res.deferred->cancel();
    return;
  }
  if (!res.deferred) {
    std::string bytes = head(res.status, res.content_type, res.headers, res.body.size());
    return write(bytes + res.body, true);
  }
  deferred_ = std::move(res.deferred);
  extra_headers_ = std::move(res.headers);
  head_sent_ = chunked_ = writing_ = repump_ = done_ = false;
  std::weak_ptr<HttpSession> weak = shared_from_this();
  deferred_->start([weak, exec = stream_.get_executor()] {
    net::post(exec, [weak] {
      if (auto s = weak.lock()) s->pump();
    });
  });
  tick();
  pump();
}

void HttpSession::pump() {
  if (!deferred_ || closed_) return;
  if (writing_) {
    repump_ = true;
    return;
  }
  DeferredResponse::Piece p;
  try {
    p = deferred_->next();
  } catch (const std::exception& e) {
    spdlog::error("response to {} failed: {}", remote_, e.what());
    deferred_->cancel();
    deferred_.reset();
    if (!head_sent_) return write_error(500, std::string("Internal error: ") + e.what(), "server_error");
    return close_now();
  }
  std::string bytes;
  if (p.head) {
    head_sent_ = true;
    auto headers = p.head->headers;
    headers.insert(headers.end(), extra_headers_.begin(), extra_headers_.end());
    if (p.head->chunked) {
      chunked_ = http11_;  // an HTTP/1.0 client reads the stream to the connection's end
      bytes = head(p.head->status, p.head->content_type, headers, std::nullopt);
    } else {
      bytes = head(p.head->status, p.head->content_type, headers, p.data.size()) + p.data;
      p.data.clear();
    }
  }
  if (!p.data.empty()) bytes += chunked_ ? chunk(p.data) : p.data;
  if (p.done) {
    done_ = true;
    if (chunked_) bytes += "0\r\n\r\n";
  }
  if (!bytes.empty()) {
    write(std::move(bytes), done_);
  } else if (done_) {
    finish_response();
  }
}

void HttpSession::tick() {
  ticker_.expires_after(kTick);
  ticker_.async_wait([self = shared_from_this(), d = deferred_.get()](beast::error_code ec) {
    if (ec || self->closed_ || self->deferred_.get() != d || d == nullptr) return;
    if (self->client_gone()) {
      self->close_now();
      return;
    }
    self->pump();
    if (self->deferred_.get() == d) self->tick();
  });
}

bool HttpSession::client_gone() {
  // The client sends nothing while it waits (but perhaps its next request): a readable socket
  // with no bytes is one it closed.
  char c;
  const ssize_t r = ::recv(stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void HttpSession::write(std::string bytes, bool last) {
  writing_ = true;
  auto buf = std::make_shared<std::string>(std::move(bytes));
  // A client that stops reading its answer is dropped after the timeout, its requests aborted.
  stream_.expires_after(std::chrono::seconds(host_.options().http_timeout_seconds));
  net::async_write(stream_, net::buffer(*buf), [self = shared_from_this(), buf, last](beast::error_code ec, size_t) {
    self->writing_ = false;
    if (ec) return self->close_now();
    if (last) return self->finish_response();
    if (self->repump_) {
      self->repump_ = false;
      self->pump();
    }
  });
}

void HttpSession::finish_response() {
  deferred_.reset();
  ticker_.cancel();
  stream_.expires_never();
  if (!keep_alive_ || host_.closing()) return close_now();
  read_request();  // a pipelined request may already be in the buffer
}

std::string HttpSession::head(int status, const std::string& content_type,
                              const std::vector<std::pair<std::string, std::string>>& headers,
                              std::optional<size_t> length) {
  std::string h = fmt::format("HTTP/1.1 {} {}\r\n", status,
                              std::string(http::obsolete_reason(static_cast<http::status>(status))));
  if (!content_type.empty()) h += "Content-Type: " + content_type + "\r\n";
  if (length) {
    h += fmt::format("Content-Length: {}\r\n", *length);
  } else if (chunked_) {
    h += "Transfer-Encoding: chunked\r\n";
  } else {
    keep_alive_ = false;  // the body ends where the connection does
  }
  for (const auto& [k, v] : headers) h += k + ": " + v + "\r\n";
  if (host_.closing()) keep_alive_ = false;
  h += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return h;
}

void HttpSession::write_error(int status, const std::string& message, const char* code) {
  keep_alive_ = false;
  busy_ = true;
  const std::string body =
      error_body(ApiError(status, message, status >= 500 ? "server_error" : "invalid_request_error", "", code));
  write(head(status, "application/json", {}, body.size()) + body, true);
}

}  // namespace serve8
