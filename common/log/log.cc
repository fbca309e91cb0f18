#include "common/log/log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <cstdlib>

namespace tally::log {

void setup(const std::string& name, const std::string& level, spdlog::level::level_enum fallback) {
  auto logger = spdlog::stderr_logger_mt(name + "-" + std::to_string(reinterpret_cast<uintptr_t>(&level)));
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [" + name + "] [%l] %v");
  std::string chosen = level;
  if (chosen.empty()) {
    const char* env = std::getenv("TALLY_LOG_LEVEL");
    chosen = env != nullptr ? env : "";
  }
  spdlog::level::level_enum parsed = chosen.empty() ? fallback : spdlog::level::from_str(chosen);
  logger->set_level(parsed);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

}  // namespace tally::log
