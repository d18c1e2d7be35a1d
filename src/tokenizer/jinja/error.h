// The error a Jinja chat template raises, at parse time (syntax) or render time (a failed
// raise_exception, an undefined value, a type error), with the template line it happened on.
#pragma once

#include <string>

#include "core/error.h"

namespace serve8::jinja {

class JinjaError : public Error {
 public:
  JinjaError(int line, std::string reason);
  int line() const { return line_; }
  // What went wrong, without the line: for raise_exception, the template's own message, which is
  // what a client should see in the HTTP 400.
  const std::string& reason() const { return reason_; }

 private:
  int line_;
  std::string reason_;
};

}  // namespace serve8::jinja
