// ApiError: a request the server refuses, as an HTTP status and OpenAI's error object
// {"error": {"message", "type", "param", "code"}}. Request parsing throws it; the route layer
// turns it into the response, so a bad request never reaches the engine.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace serve8 {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string type, std::string param = "", std::string code = "")
      : std::runtime_error(message),
        status_(status),
        type_(std::move(type)),
        param_(std::move(param)),
        code_(std::move(code)) {}

  int status() const { return status_; }
  const char* message() const { return what(); }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }  // the request field at fault; "" when none
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string type_;
  std::string param_;
  std::string code_;
};

// 400 for a request the server understood but will not run; `param` names the offending field.
inline ApiError invalid_request(std::string message, std::string param = "") {
  return ApiError(400, std::move(message), "invalid_request_error", std::move(param));
}

template <typename... Args>
[[noreturn]] void throw_invalid(const std::string& param, fmt::format_string<Args...> f, Args&&... args) {
  throw invalid_request(fmt::format(f, std::forward<Args>(args)...), param);
}

inline ApiError model_not_found(const std::string& model, const std::string& served) {
  return ApiError(404, fmt::format("The model '{}' does not exist; this server serves '{}'", model, served),
                  "invalid_request_error", "model", "model_not_found");
}

inline ApiError server_overloaded(std::string message) {
  return ApiError(503, std::move(message), "server_error", "", "overloaded");
}

}  // namespace serve8
