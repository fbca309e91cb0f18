#include "server/main/flags.h"
#include "server/scheduler/priority_policy.h"

#include <CLI/CLI.hpp>

namespace tally::server {

std::optional<int> parseCommandLine(int argc, char** argv, CommandLine& f) {
  CLI::App app{"tallyd: shares GPUs between CUDA applications that run with libtally_client.so"};
  app.add_option("--config", f.configPath, "TOML configuration file");
  app.add_flag("--check-config", f.checkConfig,
               "check the configuration (file, flags, listeners) and exit: 0 if tallyd would start with it");
  app.add_option("--listen", f.listen, "unix:/path, tls://host:port or tcp://host:port (repeatable)");
  app.add_option("--admin", f.admin, "control socket for tallyctl: unix:PATH, or \"\" for none");
  app.add_option("--metrics", f.metricsListen, "Prometheus endpoint HOST:PORT (IPv4), \"\" for none");
  app.add_option("--log-level", f.logLevel, "trace, debug, info, warn, error");
  app.add_option("--tls-cert", f.tlsCert, "PEM certificate (chain) for tls:// listeners");
  app.add_option("--tls-key", f.tlsKey, "PEM private key of --tls-cert");
  app.add_option("--tls-client-ca", f.tlsClientCa, "PEM CA: tls:// clients must present a certificate it signed");
  app.add_option("--transform", f.transform, "kernel transforms: off, lazy, stress (test aid)")
      ->check(CLI::IsMember({"off", "lazy", "stress"}));
  app.add_option("--cache-dir", f.cacheDir, "directory of compiled kernel variants and learned durations");
  app.add_option("--library-dir", f.libraryDir, "directory searched first for libcublas, libcublasLt, libcudnn");
  app.add_option("--trace-calls", f.traceCalls, "append per-call timestamps to FILE (bench/trace/trace_report.py)");
  app.add_option("--policy", f.policy, "scheduler: passthrough or priority")
      ->check(CLI::IsMember({"passthrough", "priority"}));
  app.add_option("--budget-us", f.budgetMicros, "priority: turnaround budget of best-effort kernels, µs");
  app.add_option("--idle-window-us", f.idleWindowMicros, "priority: HP idle time before best-effort work runs, µs");
  app.add_flag("--gate", f.gate, "priority: hold best-effort kernels while HP runs");
  app.add_flag("--no-gate", f.noGate, "priority: do not hold best-effort kernels while HP runs (the default)");
  app.add_flag("--transforms", f.transforms, "priority: run long best-effort kernels as PTB / sliced variants");
  app.add_flag("--no-transforms", f.noTransforms, "priority: never run best-effort kernels as variants (the default)");
  app.add_option("--hp-chain", f.hpChain,
                 "priority: run HP kernels with PTX chained (programmatic dependent launch): auto (while best-effort "
                 "work is queued), always, off")
      ->check(CLI::IsMember({"auto", "always", "off"}));
  app.add_flag("--no-stream-priorities", f.noStreamPriorities, "priority: leave stream priorities alone (ablation)");
  app.add_flag("--no-hp-launch-thread", f.noHpLaunchThread,
               "HP tenants' launches are made by their session thread too (ablation; hp_launch_thread)");
  app.add_option("--hp-poll-us", f.hpPollMicros, "how long an HP tenant's session thread polls its socket before it sleeps, µs");
  app.add_option("--hardware-queues", f.hardwareQueues,
                 "hardware work queues per GPU for all tenants' streams (1-32; 0: the driver's default)")
      ->check(CLI::Range(0, 32));
  app.add_option("--bulk-lanes", f.bulkLanes, "bulk lanes a TCP/TLS tenant may open for large copies (0-8; 0: none)")
      ->check(CLI::Range(0, 8));
  app.add_option("--sm-partition", f.smPartition,
                 "priority: off, or increasing reserves N or P% (SMs for HP, or a share of them) separated by commas, optionally :overlap — while HP and best-effort tenants are both active");
  app.add_option("--partition-idle-ms", f.partitionIdleMillis, "priority: a class idle this long ends the SM split, ms");
  app.add_flag("--partition-control", f.partitionControl,
               "priority: use the smallest SM reserve that serves HP as well as the next larger one (learned online)");
  app.add_option("--hp-p99-budget", f.hpP99Budget,
                 "priority: use the smallest SM reserve whose HP p99 stays within <µs>us or <factor>x of HP alone (learned online)");
  app.add_flag("--partition-gate", f.partitionGate, "priority: also gate and transform best-effort work while split (ablation)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return std::nullopt;
}

bool applyCommandLine(const CommandLine& f, Config& config, std::string& error) {
  if (!f.listen.empty()) config.listen = f.listen;
  if (f.admin && !parseAdminSocket(*f.admin, config.adminSocket, error)) {
    error = "--admin: " + error;
    return false;
  }
  if (f.metricsListen) config.metricsListen = *f.metricsListen;
  if (!f.logLevel.empty()) config.logLevel = f.logLevel;
  if (!f.tlsCert.empty()) config.tlsCert = f.tlsCert;
  if (!f.tlsKey.empty()) config.tlsKey = f.tlsKey;
  if (!f.tlsClientCa.empty()) config.tlsClientCa = f.tlsClientCa;
  if (!f.transform.empty()) config.transform = f.transform;
  if (!f.cacheDir.empty()) config.cacheDir = f.cacheDir;
  if (!f.libraryDir.empty()) config.libraryDir = f.libraryDir;
  if (!f.traceCalls.empty()) config.traceCalls = f.traceCalls;
  auto& sched = config.scheduler;
  if (!f.policy.empty()) sched.policy = f.policy;
  if (f.budgetMicros) sched.budgetMicros = *f.budgetMicros;
  if (f.idleWindowMicros) sched.idleWindowMicros = *f.idleWindowMicros;
  if (f.gate) sched.gate = true;
  if (f.noGate) sched.gate = false;
  if (f.transforms) sched.transforms = true;
  if (f.noTransforms) sched.transforms = false;
  if (f.noStreamPriorities) sched.streamPriorities = false;
  if (!f.hpChain.empty()) sched.hpChain = *scheduler::parseHpChain(f.hpChain);  // checked by CLI11
  if (f.smPartition) {
    sched.smPartition = gpu::parseSmPartitionSpec(*f.smPartition, error);
    if (!error.empty()) {
      error = "--sm-partition: " + error;
      return false;
    }
  }
  if (f.hpPollMicros) config.highPriorityPollMicros = *f.hpPollMicros;
  if (f.hardwareQueues) config.hardwareQueues = *f.hardwareQueues;
  if (f.noHpLaunchThread) config.highPriorityLaunchThread = false;
  if (f.bulkLanes) config.bulkLanes = *f.bulkLanes;
  if (f.partitionIdleMillis) sched.partitionIdleMillis = *f.partitionIdleMillis;
  if (f.partitionGate) sched.partitionGate = true;
  if (f.partitionControl) sched.partitionControl = true;
  if (f.hpP99Budget) {
    auto budget = scheduler::parseHpP99Budget(*f.hpP99Budget, error);
    if (!budget) {
      error = "--hp-p99-budget: " + error;
      return false;
    }
    sched.hpP99Budget = *budget;
  }
  sched.profilesPath = config.cacheDir + "/kernel-durations.tsv";
  return true;
}

}  // namespace tally::server
