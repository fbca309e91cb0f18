// tallyd's command line. Every flag but --config and --check-config overrides the
// configuration key of the same meaning (docs/operations.md): defaults, then the file, then
// the flags.
#pragma once

#include "server/main/config.h"

#include <optional>
#include <string>
#include <vector>

namespace tally::server {

struct CommandLine {
  std::string configPath;
  bool checkConfig = false;
  // Overrides; empty / nullopt / false: keep the file's value.
  std::vector<std::string> listen;
  std::optional<std::string> admin, metricsListen;
  std::string logLevel, transform, cacheDir, libraryDir, traceCalls, policy, tlsCert, tlsKey, tlsClientCa, hpChain;
  std::optional<double> budgetMicros, idleWindowMicros, partitionIdleMillis;
  std::optional<std::string> hpP99Budget;
  std::optional<std::string> smPartition;
  std::optional<unsigned> hpPollMicros;
  std::optional<unsigned> hardwareQueues;
  std::optional<unsigned> bulkLanes;
  bool gate = false, noGate = false, transforms = false, noTransforms = false, noStreamPriorities = false;
  bool noHpLaunchThread = false;
  bool partitionGate = false, partitionControl = false;
};

// Parses argv; nullopt to go on, or the exit status (--help, or a bad flag, already reported).
std::optional<int> parseCommandLine(int argc, char** argv, CommandLine& flags);

// Applies the overrides to `config`; false with `error` for a bad value.
bool applyCommandLine(const CommandLine& flags, Config& config, std::string& error);

}  // namespace tally::server
