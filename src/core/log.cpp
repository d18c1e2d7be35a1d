#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace serve8 {

void init_logging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("serve8");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  auto lvl = spdlog::level::from_str(level == "warning" ? "warn" : level);
  spdlog::set_level(lvl);
}

}  // namespace serve8
