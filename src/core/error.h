// serve8::Error: the one exception type, carrying a message a user can act on.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace serve8 {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// SERVE8_CHECK(cond, "fmt {}", args...): throws Error with the formatted message when cond fails.
#define SERVE8_CHECK(cond, ...)                                     \
  do {                                                              \
    if (!(cond)) throw ::serve8::Error(::fmt::format(__VA_ARGS__)); \
  } while (0)

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace serve8
