#include "server/main/config.h"
#include "server/main/flags.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace tally::server {
namespace {

constexpr const char* kHashA = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
constexpr const char* kHashB = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

// Writes `text` to a fresh file and loads it over default settings.
class ConfigFile : public ::testing::Test {
 protected:
  void TearDown() override {
    if (!path_.empty()) ::unlink(path_.c_str());
  }

  bool load(const std::string& text) {
    char name[] = "/tmp/tally-config-test.XXXXXX";
    int fd = ::mkstemp(name);
    EXPECT_GE(fd, 0);
    ::close(fd);
    path_ = name;
    std::ofstream(path_) << text;
    config_ = Config{};
    error_.clear();
    return loadConfigFile(path_, config_, error_);
  }

  // Loads a file with one [[tenant]] made of `keys`; returns the error text ("" if it loaded).
  std::string tenantError(const std::string& keys) {
    return load("[[tenant]]\n" + keys) ? std::string() : error_;
  }

  std::string path_;
  Config config_;
  std::string error_;
};

TEST_F(ConfigFile, ValidFileWithTwoTenants) {
  ASSERT_TRUE(load(std::string("require_auth = true\nlog_level = \"debug\"\n") +
                   "[[tenant]]\nname = \"inference\"\ntoken_sha256 = \"" + kHashA +
                   "\"\nallowed_priority = \"high\"\nmemory_quota_bytes = 1073741824\nmax_streams = 8\n"
                   "max_calls_per_second = 50000\nstaging_mib = 256\n"
                   "[[tenant]]\nname = \"training\"\ntoken_sha256 = \"" + kHashB +
                   "\"\nunix_uid = 1000\nallowed_priority = \"best-effort\"\ncap_priority = true\n"))
      << error_;
  EXPECT_TRUE(config_.auth.requireAuth);
  EXPECT_EQ(config_.logLevel, "debug");
  ASSERT_EQ(config_.auth.tenants.size(), 2u);
  const auto& a = config_.auth.tenants[0];
  EXPECT_EQ(a.name, "inference");
  ASSERT_TRUE(a.tokenSha256.has_value());
  EXPECT_EQ((*a.tokenSha256)[0], 0xba);
  EXPECT_FALSE(a.unixUid.has_value());
  EXPECT_EQ(a.allowedPriority, session::AllowedPriority::kHigh);
  EXPECT_FALSE(a.capPriority);
  EXPECT_EQ(a.limits.memoryQuotaBytes, 1ull << 30);
  EXPECT_EQ(a.limits.maxStreams, 8u);
  EXPECT_EQ(a.limits.maxCallsPerSecond, 50000u);
  EXPECT_EQ(a.limits.stagingBytes, 256ull << 20);
  const auto& b = config_.auth.tenants[1];
  EXPECT_EQ(b.unixUid, 1000u);
  EXPECT_EQ(b.allowedPriority, session::AllowedPriority::kBestEffort);
  EXPECT_TRUE(b.capPriority);
  EXPECT_EQ(b.limits.memoryQuotaBytes, 0u);
  EXPECT_EQ(b.limits.maxStreams, 0u);
  EXPECT_EQ(b.limits.maxCallsPerSecond, 0u);
  EXPECT_EQ(b.limits.stagingBytes, 64ull << 20);  // the default
}

TEST_F(ConfigFile, ObjectLimitsOfATenant) {
  ASSERT_TRUE(load(std::string("[[tenant]]\nname = \"a\"\ntoken_sha256 = \"") + kHashA +
                   "\"\nmax_events = 100\nmax_modules = 0\nmax_host_mappings = 7\n"))
      << error_;
  const auto& limits = config_.auth.tenants.at(0).limits;
  EXPECT_EQ(limits.maxEvents, 100u);
  EXPECT_EQ(limits.maxModules, 0u);  // unlimited
  EXPECT_EQ(limits.maxHostMappings, 7u);
  std::string token = std::string("name = \"a\"\ntoken_sha256 = \"") + kHashA + "\"\n";
  EXPECT_NE(tenantError(token + "max_events = -1\n").find("'max_events' must be an integer"), std::string::npos);
  EXPECT_NE(tenantError(token + "max_modules = 4294967296\n").find("'max_modules'"), std::string::npos);
  EXPECT_NE(tenantError(token + "max_host_mappings = \"many\"\n").find("'max_host_mappings'"), std::string::npos);
}

TEST_F(ConfigFile, DefaultsKeepTodaysBehaviour) {
  ASSERT_TRUE(load("poll_us = 10\n")) << error_;
  EXPECT_FALSE(config_.auth.requireAuth);
  EXPECT_TRUE(config_.auth.tenants.empty());
  EXPECT_TRUE(config_.sharedRings);
  EXPECT_TRUE(config_.highPriorityLaunchThread);
}

TEST_F(ConfigFile, SharedRingsCanBeTurnedOff) {
  ASSERT_TRUE(load("shared_rings = false\n")) << error_;
  EXPECT_FALSE(config_.sharedRings);
}

TEST_F(ConfigFile, LaunchThreadsCanBeTurnedOff) {
  ASSERT_TRUE(load("hp_launch_thread = false\n")) << error_;
  EXPECT_FALSE(config_.highPriorityLaunchThread);
  EXPECT_FALSE(load("hp_launch_thread = \"no\"\n")) << "a string where a bool belongs was accepted";
}

TEST_F(ConfigFile, BestEffortNiceIsBounded) {
  ASSERT_TRUE(load("poll_us = 50\n")) << error_;
  EXPECT_EQ(config_.bestEffortNice, 5u);
  ASSERT_TRUE(load("best_effort_nice = 0\n")) << error_;
  EXPECT_EQ(config_.bestEffortNice, 0u);
  EXPECT_FALSE(load("best_effort_nice = 20\n")) << "a nice value past 19 was accepted";
  EXPECT_NE(error_.find("best_effort_nice"), std::string::npos) << error_;
}

TEST_F(ConfigFile, HardwareQueuesAreBounded) {
  ASSERT_TRUE(load("poll_us = 50\n")) << error_;
  EXPECT_EQ(config_.hardwareQueues, 0u) << "the default leaves the driver's own count";
  ASSERT_TRUE(load("hardware_queues = 32\n")) << error_;
  EXPECT_EQ(config_.hardwareQueues, 32u);
  EXPECT_FALSE(load("hardware_queues = 33\n")) << "the driver takes at most 32";
  EXPECT_NE(error_.find("hardware_queues"), std::string::npos) << error_;
}

TEST_F(ConfigFile, UidOnlyTenantDefaultsToAnyPriority) {
  ASSERT_TRUE(load("[[tenant]]\nname = \"local\"\nunix_uid = 0\n")) << error_;
  ASSERT_EQ(config_.auth.tenants.size(), 1u);
  EXPECT_EQ(config_.auth.tenants[0].unixUid, 0u);
  EXPECT_FALSE(config_.auth.tenants[0].tokenSha256.has_value());
  EXPECT_EQ(config_.auth.tenants[0].allowedPriority, session::AllowedPriority::kAny);
}

TEST_F(ConfigFile, UnknownTopLevelKey) {
  EXPECT_FALSE(load("requre_auth = true\n"));
  EXPECT_NE(error_.find("unknown key 'requre_auth'"), std::string::npos) << error_;
}

TEST_F(ConfigFile, BadRequireAuth) {
  EXPECT_FALSE(load("require_auth = \"yes\"\n"));
  EXPECT_NE(error_.find("'require_auth' must be true or false"), std::string::npos) << error_;
}

TEST_F(ConfigFile, TenantMustBeArrayOfTables) {
  EXPECT_FALSE(load("tenant = 3\n"));
  EXPECT_NE(error_.find("[[tenant]]"), std::string::npos) << error_;
}

TEST_F(ConfigFile, BadTenantValues) {
  std::string name = "name = \"t\"\n";
  std::string token = std::string("token_sha256 = \"") + kHashA + "\"\n";
  struct Case {
    std::string keys;
    std::string expected;
  } cases[] = {
      {token, "'name' is required"},
      {"name = \"\"\n" + token, "'name' is required"},
      {"name = 7\n" + token, "'name' must be a string"},
      {name, "needs 'token_sha256', 'unix_uid' or 'tls_subject'"},
      {name + "token_sha256 = \"abc\"\n", "64 hex digits"},
      {name + "token_sha256 = \"" + std::string(64, 'z') + "\"\n", "64 hex digits"},
      {name + "token_sha256 = 5\n", "'token_sha256' must be a string"},
      {name + "unix_uid = -1\n", "'unix_uid' must be an integer"},
      {name + "unix_uid = 4294967295\n", "'unix_uid' must be an integer"},
      {name + "unix_uid = \"1000\"\n", "'unix_uid' must be an integer"},
      {name + token + "allowed_priority = \"urgent\"\n", "'allowed_priority' is 'urgent'"},
      {name + token + "allowed_priority = 1\n", "'allowed_priority' must be a string"},
      {name + token + "cap_priority = 1\n", "'cap_priority' must be true or false"},
      {name + token + "memory_quota_bytes = -5\n", "'memory_quota_bytes' must be an integer"},
      {name + token + "memory_quota_bytes = 1.5\n", "'memory_quota_bytes' must be an integer"},
      {name + token + "max_streams = -1\n", "'max_streams' must be an integer"},
      {name + token + "max_streams = 4294967296\n", "'max_streams' must be an integer"},
      {name + token + "max_calls_per_second = -1\n", "'max_calls_per_second' must be an integer"},
      {name + token + "staging_mib = 0\n", "'staging_mib' must be an integer"},
      {name + token + "quota = 1\n", "unknown key 'quota'"},
  };
  for (const Case& c : cases) {
    std::string error = tenantError(c.keys);
    EXPECT_NE(error.find(c.expected), std::string::npos) << "keys:\n" << c.keys << "error: " << error;
    EXPECT_NE(error.find("[[tenant]] #1"), std::string::npos) << error;
  }
}

TEST_F(ConfigFile, ContextLimitMaxima) {
  ASSERT_TRUE(load(std::string("[[tenant]]\nname = \"cdp\"\ntoken_sha256 = \"") + kHashA +
                   "\"\nmax_stack_bytes = 65536\nmax_malloc_heap_bytes = 0\nmax_printf_fifo_bytes = 1048576\n"
                   "max_pending_launches = 4096\n[[tenant]]\nname = \"plain\"\ntoken_sha256 = \"" + kHashB + "\"\n"))
      << error_;
  const auto& limits = config_.auth.tenants[0].limits;
  EXPECT_EQ(limits.maxStackBytes, 65536u);
  EXPECT_EQ(limits.maxMallocHeapBytes, 0u);  // no maximum
  EXPECT_EQ(limits.maxPrintfFifoBytes, 1u << 20);
  EXPECT_EQ(limits.maxPendingLaunches, 4096u);
  EXPECT_EQ(config_.auth.tenants[1].limits.maxStackBytes, session::TenantLimits{}.maxStackBytes);  // the default
  EXPECT_FALSE(load(std::string("[[tenant]]\nname = \"x\"\ntoken_sha256 = \"") + kHashA +
                    "\"\nmax_stack_bytes = -1\n"));
  EXPECT_NE(error_.find("'max_stack_bytes' must be an integer"), std::string::npos) << error_;
}

TEST_F(ConfigFile, DuplicateTenants) {
  std::string a = std::string("[[tenant]]\nname = \"a\"\ntoken_sha256 = \"") + kHashA + "\"\n";
  EXPECT_FALSE(load(a + a));
  EXPECT_NE(error_.find("defined twice"), std::string::npos) << error_;
  EXPECT_FALSE(load(a + "[[tenant]]\nname = \"b\"\ntoken_sha256 = \"" + kHashA + "\"\n"));
  EXPECT_NE(error_.find("same credentials"), std::string::npos) << error_;
  EXPECT_FALSE(load("[[tenant]]\nname = \"a\"\nunix_uid = 5\n[[tenant]]\nname = \"b\"\nunix_uid = 5\n"));
  EXPECT_NE(error_.find("same credentials"), std::string::npos) << error_;
  // Certificate subjects: distinct ones are two tenants, the same one twice is ambiguous.
  std::string subjectA = "[[tenant]]\nname = \"a\"\ntls_subject = \"CN=a\"\n";
  EXPECT_TRUE(load(subjectA + "[[tenant]]\nname = \"b\"\ntls_subject = \"CN=b\"\n")) << error_;
  EXPECT_FALSE(load(subjectA + "[[tenant]]\nname = \"b\"\ntls_subject = \"CN=a\"\n"));
  EXPECT_NE(error_.find("same credentials"), std::string::npos) << error_;
  EXPECT_FALSE(load("[[tenant]]\nname = \"a\"\ntls_subject = \"\"\n"));
  EXPECT_NE(error_.find("'tls_subject' must be a non-empty string"), std::string::npos) << error_;
}

TEST_F(ConfigFile, ConnectionLimitsAndAnonymousPriority) {
  ASSERT_TRUE(load("poll_us = 10\n")) << error_;
  EXPECT_EQ(config_.handshakeTimeoutMs, 5000u);
  EXPECT_EQ(config_.maxConnections, 256u);
  EXPECT_FALSE(config_.auth.allowAnonymousHighPriority);
  ASSERT_TRUE(load("handshake_timeout_ms = 750\nmax_connections = 3\nallow_anonymous_high_priority = true\n")) << error_;
  EXPECT_EQ(config_.handshakeTimeoutMs, 750u);
  EXPECT_EQ(config_.maxConnections, 3u);
  EXPECT_TRUE(config_.auth.allowAnonymousHighPriority);
  EXPECT_FALSE(load("handshake_timeout_ms = 0\n"));
  EXPECT_NE(error_.find("'handshake_timeout_ms' must be an integer from 100"), std::string::npos) << error_;
  EXPECT_FALSE(load("max_connections = 0\n"));
  EXPECT_NE(error_.find("'max_connections'"), std::string::npos) << error_;
  EXPECT_FALSE(load("allow_anonymous_high_priority = \"yes\"\n"));
  EXPECT_NE(error_.find("true or false"), std::string::npos) << error_;
}

TEST_F(ConfigFile, SmPartitions) {
  ASSERT_TRUE(load("poll_us = 10\n")) << error_;
  EXPECT_FALSE(config_.scheduler.smPartition);  // off unless asked
  ASSERT_TRUE(load("priority_sm_partition = \"40\"\npriority_partition_idle_ms = 50\n")) << error_;
  ASSERT_TRUE(config_.scheduler.smPartition);
  const gpu::SmPartitionSpec& spec = *config_.scheduler.smPartition;
  ASSERT_EQ(spec.levels(), 1u);
  EXPECT_EQ(spec.reserves[0].size, 40u);
  EXPECT_FALSE(spec.reserves[0].overlap);
  EXPECT_EQ(config_.scheduler.partitionIdleMillis, 50);
  ASSERT_TRUE(load("priority_sm_partition = \"64:overlap\"\n")) << error_;
  EXPECT_TRUE(config_.scheduler.smPartition->reserves[0].overlap);
  ASSERT_TRUE(load("priority_sm_partition = \"30%:overlap\"\n")) << error_;
  EXPECT_TRUE(config_.scheduler.smPartition->percent);
  EXPECT_TRUE(config_.scheduler.smPartition->reserves[0].overlap);
  EXPECT_EQ(config_.scheduler.smPartition->hpSmsOf(132, 0), 40u);  // the H200's 40 of 132
  EXPECT_EQ(config_.scheduler.smPartition->hpSmsOf(2, 0), 1u);      // never none
  // Levels in increasing strength: larger, or as large without overlap.
  ASSERT_TRUE(load("priority_sm_partition = \"24:overlap,40:overlap,40,64\"\npriority_hp_p99_budget = \"600us\"\n"))
      << error_;
  ASSERT_EQ(config_.scheduler.smPartition->levels(), 4u);
  EXPECT_TRUE(config_.scheduler.smPartition->reserves[1].overlap);
  EXPECT_FALSE(config_.scheduler.smPartition->reserves[2].overlap);
  EXPECT_EQ(config_.scheduler.smPartition->hpSmsOf(132, 3), 64u);
  EXPECT_EQ(config_.scheduler.hpP99Budget.micros, 600);
  ASSERT_TRUE(load("priority_hp_p99_budget = \"1.5x\"\n")) << error_;
  EXPECT_EQ(config_.scheduler.hpP99Budget.factor, 1.5);
  for (const char* bad : {"\"600\"", "\"0.5x\"", "\"-3us\"", "\"x\"", "\"1.5 x\""}) {
    EXPECT_FALSE(load(std::string("priority_hp_p99_budget = ") + bad + "\n")) << bad;
    EXPECT_NE(error_.find("priority_hp_p99_budget"), std::string::npos) << error_;
  }
  EXPECT_EQ(config_.scheduler.hpChain, scheduler::SchedulerConfig::HpChain::kWhileBestEffort);  // the default
  ASSERT_TRUE(load("priority_hp_chain = \"off\"\n")) << error_;
  EXPECT_EQ(config_.scheduler.hpChain, scheduler::SchedulerConfig::HpChain::kOff);
  EXPECT_FALSE(load("priority_hp_chain = \"on\"\n"));
  EXPECT_NE(error_.find("priority_hp_chain"), std::string::npos) << error_;
  ASSERT_TRUE(load("priority_sm_partition = \"off\"\n")) << error_;
  EXPECT_FALSE(config_.scheduler.smPartition);
  for (const char* bad : {"\"40:wide\"", "\"0\"", "\"x\"", "\"-8\"", "\"0%\"", "\"100%\"", "\"%\"", "\"30%%\"",
                          "\"40,24\"", "\"24,24\"", "\"40,40:overlap\"", "\"24,30%\"", "\"24,\"", "\"8,16,24,32,40\"",
                          "\"24:overlap:overlap\""}) {
    EXPECT_FALSE(load(std::string("priority_sm_partition = ") + bad + "\n")) << bad;
    EXPECT_NE(error_.find("priority_sm_partition"), std::string::npos) << error_;
  }
}

// The scheduler's flags override the file: the opt-in layers, the reserves and the budget.
TEST(CommandLine, SchedulerFlagsOverrideTheFile) {
  auto apply = [](std::vector<std::string> args, Config& config, std::string& error) {
    args.insert(args.begin(), "tallyd");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    CommandLine flags;
    EXPECT_FALSE(parseCommandLine(static_cast<int>(argv.size()), argv.data(), flags));
    return applyCommandLine(flags, config, error);
  };
  Config config;
  std::string error;
  EXPECT_FALSE(config.scheduler.gate);  // opt-in
  EXPECT_FALSE(config.scheduler.transforms);
  ASSERT_TRUE(apply({"--policy", "priority", "--gate", "--transforms", "--sm-partition", "24:overlap,40",
                     "--hp-p99-budget", "800us"},
                    config, error))
      << error;
  EXPECT_TRUE(config.scheduler.gate);
  EXPECT_TRUE(config.scheduler.transforms);
  ASSERT_TRUE(config.scheduler.smPartition);
  EXPECT_EQ(config.scheduler.smPartition->levels(), 2u);
  EXPECT_EQ(config.scheduler.hpP99Budget.micros, 800);
  ASSERT_TRUE(apply({"--no-gate", "--hp-p99-budget", "off", "--hp-chain", "always"}, config, error)) << error;
  EXPECT_FALSE(config.scheduler.gate);
  EXPECT_EQ(config.scheduler.hpChain, scheduler::SchedulerConfig::HpChain::kAlways);
  EXPECT_FALSE(config.scheduler.hpP99Budget.set());
  EXPECT_FALSE(apply({"--hp-p99-budget", "fast"}, config, error));
  EXPECT_NE(error.find("--hp-p99-budget"), std::string::npos) << error;
}

// Finding 14: subjects are compared whole, in RFC 2253 form; the old one-line form is refused
// with the form to use instead of silently never matching.
TEST_F(ConfigFile, TlsSubjectIsTheRfc2253Form) {
  ASSERT_TRUE(load("[[tenant]]\nname = \"a\"\ntls_subject = \"CN=a,O=Acme\\\\, Inc.\"\n")) << error_;
  EXPECT_EQ(config_.auth.tenants[0].tlsSubject, "CN=a,O=Acme\\, Inc.");
  EXPECT_FALSE(load("[[tenant]]\nname = \"a\"\ntls_subject = \"/CN=a\"\n"));
  EXPECT_NE(error_.find("RFC 2253"), std::string::npos) << error_;
}

TEST_F(ConfigFile, SyntaxError) {
  EXPECT_FALSE(load("[[tenant]\n"));
  EXPECT_NE(error_.find(path_), std::string::npos) << error_;
}

}  // namespace
}  // namespace tally::server
