// One HTTP/1.1 connection: reads requests with deadlines and the body limit enforced while
// reading (chunked or not), hands each to the server's handler pool, and writes the responses
// in order (keep-alive, pipelining), deferred ones as they become ready. Internal to server/.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "server/http_message.h"
#include "server/server.h"

namespace serve8 {

// What a session needs from its server.
class SessionHost {
 public:
  virtual ~SessionHost() = default;
  virtual const ServerOptions& options() const = 0;
  virtual bool closing() const = 0;                         // shutting down: no new requests
  virtual void run_handler(std::function<void()> fn) = 0;  // off the event loop
  virtual void rejected() = 0;                              // a request refused before any route
  virtual HttpResponse handle(HttpRequest& req) = 0;
};

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(boost::asio::ip::tcp::socket socket, SessionHost& host);
  void start();
  // Closes the connection unless a request of it is being answered (shutdown's first step). Both
  // are safe from any thread: they run on the connection's strand.
  void close_if_idle();
  void close();

 private:
  void close_now();
  void read_request();
  void on_header(boost::beast::error_code ec);
  void read_body();
  void on_body(boost::beast::error_code ec);
  void on_read_error(boost::beast::error_code ec);
  void dispatch();
  void respond(HttpResponse res);
  void pump();
  void tick();
  bool client_gone();
  void write(std::string bytes, bool last);
  void finish_response();
  std::string head(int status, const std::string& content_type,
                   const std::vector<std::pair<std::string, std::string>>& headers, std::optional<size_t> length);
  void write_error(int status, const std::string& message, const char* code);

  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  boost::asio::steady_timer ticker_;
  SessionHost& host_;
  std::string remote_;
  bool busy_ = false;        // a request read in full and not yet answered
  bool keep_alive_ = true;   // of the request being answered
  bool http11_ = true;
  bool closed_ = false;
  // The deferred response being written.
  std::shared_ptr<DeferredResponse> deferred_;
  std::vector<std::pair<std::string, std::string>> extra_headers_;
  bool head_sent_ = false, chunked_ = false, writing_ = false, repump_ = false, done_ = false;
};

}  // namespace serve8
