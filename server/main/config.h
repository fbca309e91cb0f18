// tallyd's configuration: defaults, then the TOML file, then command-line flags.
#pragma once

#include "server/session/auth.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tally::server {

struct Config {
  std::vector<std::string> listen{"unix:/run/tally/tallyd.sock"};
  std::string logLevel = "info";
  unsigned unixSocketMode = 0660;
  uint64_t moduleCacheBytes = 4ull << 30;
  uint32_t maxMessageBytes = 1u << 20;
  uint32_t maxBulkBytes = 64u << 20;
  unsigned inlineWaitMicros = 50;
  unsigned pollMicros = 50;
  session::AuthPolicy auth;  // require_auth and the [[tenant]] rules
};

// Reads `path` over `config`; false with `error` on a bad file or an unknown key.
bool loadConfigFile(const std::string& path, Config& config, std::string& error);

}  // namespace tally::server
