// Logging goes to stderr through spdlog; stdout is left to command output.
#pragma once

#include <spdlog/spdlog.h>

namespace serve8 {

// Sends the default logger to stderr at the given level ("debug", "info", "warning", "error").
void init_logging(const std::string& level);

}  // namespace serve8
