#include "server/main/config.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <set>

namespace tally::server {

bool loadConfigFile(const std::string& path, Config& config, std::string& error) {
  toml::table table;
  try {
    table = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    error = fmt::format("{}: {}", path, e.description());
    return false;
  }
  static const std::set<std::string> kKnown = {"listen", "log_level", "unix_socket_mode", "module_cache_bytes",
                                               "max_message_bytes", "max_bulk_bytes", "inline_wait_us", "poll_us"};
  for (auto&& [key, value] : table) {
    if (kKnown.count(std::string(key.str())) == 0) {
      error = fmt::format("{}: unknown key '{}'", path, key.str());
      return false;
    }
  }
  if (auto* listen = table["listen"].as_array()) {
    config.listen.clear();
    for (auto&& item : *listen) {
      if (auto s = item.value<std::string>()) config.listen.push_back(*s);
    }
  }
  config.logLevel = table["log_level"].value_or(config.logLevel);
  config.unixSocketMode = table["unix_socket_mode"].value_or(config.unixSocketMode);
  config.moduleCacheBytes = table["module_cache_bytes"].value_or(config.moduleCacheBytes);
  config.maxMessageBytes = table["max_message_bytes"].value_or(config.maxMessageBytes);
  config.maxBulkBytes = table["max_bulk_bytes"].value_or(config.maxBulkBytes);
  config.inlineWaitMicros = table["inline_wait_us"].value_or(config.inlineWaitMicros);
  config.pollMicros = table["poll_us"].value_or(config.pollMicros);
  return true;
}

}  // namespace tally::server
