// Logging setup: one named spdlog logger per process, level from TALLY_LOG_LEVEL or config.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace tally::log {

// Installs a stderr logger named `name` as the default; `level` is an spdlog level name
// ("trace" … "off"); an empty level reads TALLY_LOG_LEVEL, else `fallback`.
void setup(const std::string& name, const std::string& level, spdlog::level::level_enum fallback);

}  // namespace tally::log
