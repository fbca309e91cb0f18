#include "server/main/config.h"
#include "server/scheduler/priority_policy.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <limits>
#include <set>

namespace tally::server {

namespace {

// Every key of a [[tenant]] entry; anything else is an error.
const std::set<std::string> kTenantKeys = {"name",         "token_sha256",       "unix_uid",   "tls_subject",
                                           "allowed_priority", "cap_priority", "memory_quota_bytes", "max_streams",
                                           "max_events", "max_modules", "max_host_mappings",
                                           "max_calls_per_second", "staging_mib", "max_stack_bytes",
                                           "max_malloc_heap_bytes", "max_printf_fifo_bytes", "max_pending_launches"};

// Reads an optional integer key into `out`, checking its type and range [low, high].
template <typename T>
bool readInteger(const toml::table& table, const char* key, T& out, int64_t low, int64_t high, std::string& error) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return true;
  std::optional<int64_t> value = node->is_integer() ? node->value<int64_t>() : std::nullopt;
  if (!value || *value < low || *value > high) {
    error = fmt::format("'{}' must be an integer from {} to {}", key, low, high);
    return false;
  }
  out = static_cast<T>(*value);
  return true;
}

bool readBool(const toml::table& table, const char* key, bool& out, std::string& error) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return true;
  if (!node->is_boolean()) {
    error = fmt::format("'{}' must be true or false", key);
    return false;
  }
  out = *node->value<bool>();
  return true;
}

bool readString(const toml::table& table, const char* key, std::optional<std::string>& out, std::string& error) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return true;
  if (!node->is_string()) {
    error = fmt::format("'{}' must be a string", key);
    return false;
  }
  out = *node->value<std::string>();
  return true;
}

bool parseAllowedPriority(const std::string& text, session::AllowedPriority& out) {
  if (text == "high") out = session::AllowedPriority::kHigh;
  else if (text == "best-effort") out = session::AllowedPriority::kBestEffort;
  else if (text == "any") out = session::AllowedPriority::kAny;
  else return false;
  return true;
}

bool checkTenantKeys(const toml::table& table, std::string& error) {
  for (auto&& [key, value] : table) {
    if (kTenantKeys.count(std::string(key.str())) == 0) {
      error = fmt::format("unknown key '{}'", key.str());
      return false;
    }
  }
  return true;
}

// The certificate's whole subject in RFC 2253 form, as tallyd logs it ("CN=inference-1,O=Example").
bool readTlsSubject(const toml::node& node, session::TenantRule& rule, std::string& error) {
  if (!node.is_string() || node.value<std::string>()->empty()) {
    error = "'tls_subject' must be a non-empty string such as \"CN=inference-1,O=Example\"";
    return false;
  }
  std::string subject = *node.value<std::string>();
  if (subject.front() == '/') {
    error = fmt::format("'tls_subject' = \"{}\" is OpenSSL's one-line form; tallyd compares the whole subject in "
                        "RFC 2253 form, most specific first, as it logs it (e.g. \"CN=inference-1,O=Example\")",
                        subject);
    return false;
  }
  rule.tlsSubject = std::move(subject);
  return true;
}

bool readCredentials(const toml::table& table, session::TenantRule& rule, std::string& error) {
  std::optional<std::string> hash;
  if (!readString(table, "token_sha256", hash, error)) return false;
  if (hash) {
    session::Sha256 digest{};
    if (!session::parseSha256Hex(*hash, digest)) {
      error = "'token_sha256' must be 64 hex digits (printf '%s' TOKEN | sha256sum)";
      return false;
    }
    rule.tokenSha256 = digest;
  }
  uint32_t uid = 0;
  if (table.get("unix_uid") != nullptr) {
    if (!readInteger(table, "unix_uid", uid, 0, std::numeric_limits<uint32_t>::max() - 1, error)) return false;
    rule.unixUid = uid;
  }
  if (const toml::node* subject = table.get("tls_subject")) {
    if (!readTlsSubject(*subject, rule, error)) return false;
  }
  if (!rule.tokenSha256 && !rule.unixUid && !rule.tlsSubject) {
    error = "needs 'token_sha256', 'unix_uid' or 'tls_subject' (any combination must all match)";
    return false;
  }
  return true;
}

// staging_mib: the tenant's pinned staging budget in MiB (staging_pool.h).
bool readStagingBudget(const toml::table& table, session::TenantLimits& limits, std::string& error) {
  uint64_t mib = limits.stagingBytes >> 20;
  if (!readInteger(table, "staging_mib", mib, 1, 1 << 16, error)) return false;
  limits.stagingBytes = mib << 20;
  return true;
}

// The most the tenant may raise the shared context's limits to (0: no maximum).
bool readContextLimitMaxima(const toml::table& table, session::TenantLimits& limits, std::string& error) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  return readInteger(table, "max_stack_bytes", limits.maxStackBytes, 0, kMax, error) &&
         readInteger(table, "max_malloc_heap_bytes", limits.maxMallocHeapBytes, 0, kMax, error) &&
         readInteger(table, "max_printf_fifo_bytes", limits.maxPrintfFifoBytes, 0, kMax, error) &&
         readInteger(table, "max_pending_launches", limits.maxPendingLaunches, 0, kMax, error);
}

bool readTenant(const toml::table& table, session::TenantRule& rule, std::string& error) {
  if (!checkTenantKeys(table, error)) return false;
  std::optional<std::string> name;
  if (!readString(table, "name", name, error)) return false;
  if (!name || name->empty()) {
    error = "'name' is required and must not be empty";
    return false;
  }
  rule.name = *name;
  if (!readCredentials(table, rule, error)) return false;
  std::optional<std::string> priority;
  if (!readString(table, "allowed_priority", priority, error)) return false;
  if (priority && !parseAllowedPriority(*priority, rule.allowedPriority)) {
    error = fmt::format("'allowed_priority' is '{}'; expected 'high', 'best-effort' or 'any'", *priority);
    return false;
  }
  return readBool(table, "cap_priority", rule.capPriority, error) &&
         readInteger(table, "memory_quota_bytes", rule.limits.memoryQuotaBytes, 0,
                     std::numeric_limits<int64_t>::max(), error) &&
         readInteger(table, "max_streams", rule.limits.maxStreams, 0, std::numeric_limits<int32_t>::max(), error) &&
         readInteger(table, "max_events", rule.limits.maxEvents, 0, std::numeric_limits<int32_t>::max(), error) &&
         readInteger(table, "max_modules", rule.limits.maxModules, 0, std::numeric_limits<int32_t>::max(), error) &&
         readInteger(table, "max_host_mappings", rule.limits.maxHostMappings, 0, std::numeric_limits<int32_t>::max(),
                     error) &&
         readInteger(table, "max_calls_per_second", rule.limits.maxCallsPerSecond, 0, 100'000'000, error) &&
         readStagingBudget(table, rule.limits, error) && readContextLimitMaxima(table, rule.limits, error);
}

// Names and credentials (token hash, uid, certificate subject together) must be unique, or a
// peer's identity would be ambiguous.
bool checkUnique(const std::vector<session::TenantRule>& rules, std::string& error) {
  for (size_t i = 0; i < rules.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (rules[i].name == rules[j].name) {
        error = fmt::format("tenant '{}' is defined twice", rules[i].name);
        return false;
      }
      if (rules[i].unixUid == rules[j].unixUid && rules[i].tlsSubject == rules[j].tlsSubject &&
          rules[i].tokenSha256 == rules[j].tokenSha256) {
        error = fmt::format("tenants '{}' and '{}' have the same credentials", rules[j].name, rules[i].name);
        return false;
      }
    }
  }
  return true;
}

bool readTenants(const toml::table& table, session::AuthPolicy& auth, std::string& error) {
  const toml::node* node = table.get("tenant");
  if (node == nullptr) return true;
  const toml::array* entries = node->as_array();
  if (entries == nullptr) {
    error = "'tenant' must be an array of tables ([[tenant]])";
    return false;
  }
  auth.tenants.clear();
  for (size_t i = 0; i < entries->size(); ++i) {
    const toml::table* entry = entries->get(i)->as_table();
    session::TenantRule rule;
    std::string why;
    if (entry == nullptr) {
      why = "must be a table";
    } else if (readTenant(*entry, rule, why)) {
      auth.tenants.push_back(std::move(rule));
      continue;
    }
    error = fmt::format("[[tenant]] #{}: {}", i + 1, why);
    return false;
  }
  return checkUnique(auth.tenants, error);
}

// handshake_timeout_ms and max_connections: what unauthenticated peers may hold.
bool readConnectionLimits(const toml::table& table, Config& config, std::string& error) {
  return readInteger(table, "handshake_timeout_ms", config.handshakeTimeoutMs, 100, 600'000, error) &&
         readInteger(table, "max_connections", config.maxConnections, 1, 1'000'000, error) &&
         readInteger(table, "bulk_lanes", config.bulkLanes, 0, 8, error);
}

// kernel_timeout_s and fault_quarantine_*: what a faulting tenant costs the others.
bool readFaultLimits(const toml::table& table, Config& config, std::string& error) {
  unsigned window = static_cast<unsigned>(config.quarantine.window.count());
  unsigned duration = static_cast<unsigned>(config.quarantine.duration.count());
  bool ok = readInteger(table, "kernel_timeout_s", config.kernelTimeoutSeconds, 0, 86'400, error) &&
            readInteger(table, "fault_quarantine_after", config.quarantine.after, 0, 1'000, error) &&
            readInteger(table, "fault_quarantine_window_s", window, 1, 604'800, error) &&
            readInteger(table, "fault_quarantine_s", duration, 0, 604'800, error);
  config.quarantine.window = std::chrono::seconds(window);
  config.quarantine.duration = std::chrono::seconds(duration);
  return ok;
}

}  // namespace

bool parseAdminSocket(const std::string& text, std::string& path, std::string& error) {
  static const std::string kUnix = "unix:";
  std::string candidate = text.rfind(kUnix, 0) == 0 ? text.substr(kUnix.size()) : text;
  if (candidate.find("://") != std::string::npos || (text.rfind(kUnix, 0) == 0 && candidate.empty())) {
    error = fmt::format("admin socket '{}': expected unix:PATH (the control socket is Unix only) or \"\" for none", text);
    return false;
  }
  path = candidate;
  return true;
}

bool loadConfigFile(const std::string& path, Config& config, std::string& error) {
  toml::table table;
  try {
    table = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    error = fmt::format("{}: {}", path, e.description());
    return false;
  }
  static const std::set<std::string> kKnown = {"listen",         "admin_socket",      "log_level",
                                               "unix_socket_mode", "module_cache_bytes", "max_message_bytes",
                                               "max_bulk_bytes", "inline_wait_us",    "hp_inline_wait_us",    "poll_us",    "hp_poll_us",    "shared_rings", "hp_launch_thread",
                                               "best_effort_nice", "hardware_queues",
                                               "require_auth",   "tenant",            "transform",
                                               "cache_dir",      "library_dir",       "trace_calls",       "stress_seed",       "policy",
                                               "priority_idle_window_us", "priority_budget_us", "priority_gate",
                                               "priority_transforms", "priority_stream_priorities",
                                               "priority_max_pause_us", "priority_sm_partition", "priority_partition_idle_ms",
                                               "priority_partition_gate", "priority_partition_control",
                                               "priority_hp_p99_budget", "priority_hp_chain", "tls_cert", "tls_key", "tls_client_ca",
                                               "allow_plain_tcp", "metrics_listen", "handshake_timeout_ms",
                                               "max_connections", "bulk_lanes", "allow_anonymous_high_priority",
                                               "kernel_timeout_s", "fault_quarantine_after", "fault_quarantine_window_s",
                                               "fault_quarantine_s"};
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
  config.tlsCert = table["tls_cert"].value_or(config.tlsCert);
  config.tlsKey = table["tls_key"].value_or(config.tlsKey);
  config.tlsClientCa = table["tls_client_ca"].value_or(config.tlsClientCa);
  config.allowPlainTcp = table["allow_plain_tcp"].value_or(config.allowPlainTcp);
  config.metricsListen = table["metrics_listen"].value_or(config.metricsListen);
  config.unixSocketMode = table["unix_socket_mode"].value_or(config.unixSocketMode);
  config.moduleCacheBytes = table["module_cache_bytes"].value_or(config.moduleCacheBytes);
  config.maxMessageBytes = table["max_message_bytes"].value_or(config.maxMessageBytes);
  config.maxBulkBytes = table["max_bulk_bytes"].value_or(config.maxBulkBytes);
  config.inlineWaitMicros = table["inline_wait_us"].value_or(config.inlineWaitMicros);
  config.highPriorityInlineWaitMicros = table["hp_inline_wait_us"].value_or(config.highPriorityInlineWaitMicros);
  config.pollMicros = table["poll_us"].value_or(config.pollMicros);
  config.highPriorityPollMicros = table["hp_poll_us"].value_or(config.highPriorityPollMicros);
  config.sharedRings = table["shared_rings"].value_or(config.sharedRings);
  config.transform = table["transform"].value_or(config.transform);
  config.cacheDir = table["cache_dir"].value_or(config.cacheDir);
  config.libraryDir = table["library_dir"].value_or(config.libraryDir);
  config.traceCalls = table["trace_calls"].value_or(config.traceCalls);
  config.stressSeed = table["stress_seed"].value_or(config.stressSeed);
  auto& sched = config.scheduler;
  sched.policy = table["policy"].value_or(sched.policy);
  sched.idleWindowMicros = table["priority_idle_window_us"].value_or(sched.idleWindowMicros);
  sched.budgetMicros = table["priority_budget_us"].value_or(sched.budgetMicros);
  sched.gate = table["priority_gate"].value_or(sched.gate);
  sched.transforms = table["priority_transforms"].value_or(sched.transforms);
  sched.streamPriorities = table["priority_stream_priorities"].value_or(sched.streamPriorities);
  sched.maxPauseMicros = table["priority_max_pause_us"].value_or(sched.maxPauseMicros);
  sched.partitionIdleMillis = table["priority_partition_idle_ms"].value_or(sched.partitionIdleMillis);
  sched.partitionGate = table["priority_partition_gate"].value_or(sched.partitionGate);
  sched.partitionControl = table["priority_partition_control"].value_or(sched.partitionControl);
  if (auto text = table["priority_hp_p99_budget"].value<std::string>()) {
    std::string why;
    auto budget = scheduler::parseHpP99Budget(*text, why);
    if (!budget) {
      error = fmt::format("{}: priority_hp_p99_budget: {}", path, why);
      return false;
    }
    sched.hpP99Budget = *budget;
  }
  if (auto text = table["priority_hp_chain"].value<std::string>()) {
    auto chain = scheduler::parseHpChain(*text);
    if (!chain) {
      error = fmt::format("{}: priority_hp_chain = \"{}\": expected \"auto\", \"always\" or \"off\"", path, *text);
      return false;
    }
    sched.hpChain = *chain;
  }
  if (auto spec = table["priority_sm_partition"].value<std::string>()) {
    std::string why;
    sched.smPartition = gpu::parseSmPartitionSpec(*spec, why);
    if (!why.empty()) {
      error = fmt::format("{}: priority_sm_partition: {}", path, why);
      return false;
    }
  }
  if (sched.policy != "passthrough" && sched.policy != "priority") {
    error = fmt::format("{}: policy = \"{}\": expected \"passthrough\" or \"priority\"", path, sched.policy);
    return false;
  }
  if (config.transform != "off" && config.transform != "lazy" && config.transform != "stress") {
    error = fmt::format("{}: transform = \"{}\": expected \"off\", \"lazy\" or \"stress\"", path, config.transform);
    return false;
  }
  std::string why;
  std::optional<std::string> admin;
  if (!readString(table, "admin_socket", admin, why) || (admin && !parseAdminSocket(*admin, config.adminSocket, why)) ||
      !readConnectionLimits(table, config, why) || !readFaultLimits(table, config, why) || !readBool(table, "require_auth", config.auth.requireAuth, why) ||
      !readBool(table, "allow_anonymous_high_priority", config.auth.allowAnonymousHighPriority, why) ||
      !readBool(table, "hp_launch_thread", config.highPriorityLaunchThread, why) ||
      !readInteger(table, "best_effort_nice", config.bestEffortNice, 0, 19, why) ||
      !readInteger(table, "hardware_queues", config.hardwareQueues, 0, 32, why) || !readTenants(table, config.auth, why)) {
    error = fmt::format("{}: {}", path, why);
    return false;
  }
  return true;
}

}  // namespace tally::server
