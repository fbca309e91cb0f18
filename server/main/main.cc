// tallyd: builds every module explicitly (no registries) and runs the listener's loop.
#include "common/log/log.h"
#include "common/trace/call_trace.h"
#include "server/admin/admin_server.h"
#include "server/admin/metrics_server.h"
#include "server/api/call_context.h"
#include "server/gpu/fault_monitor.h"
#include "server/gpu/gpu.h"
#include "server/gpu/module_store.h"
#include "server/library/library_loader.h"
#include "server/main/config.h"
#include "server/main/flags.h"
#include "server/main/restart.h"
#include "server/scheduler/priority_policy.h"
#include "server/session/session.h"
#include "server/transport/listener.h"

#include <spdlog/spdlog.h>

#include <capnp/serialize.h>
#include <execinfo.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <vector>

namespace tally::server {
namespace {

// Owns the live sessions: starts one per connection, stops them all on shutdown, and shows
// them to the control socket.
class SessionRegistry final : public transport::ConnectionSink, public admin::SessionSource {
 public:
  static constexpr std::chrono::milliseconds kNoticeGrace{500};

  SessionRegistry(session::SessionServices& services, const std::atomic<bool>& draining)
      : services_(services), draining_(draining) {}

  // tally::server::transport::ConnectionSink
  void onConnection(int fd, std::unique_ptr<frame::RecordLayer> records, transport::Peer peer,
                    transport::ConnectionSlot slot) override {
    uint64_t id = nextTenantId_++;
    auto s = std::make_shared<session::Session>(fd, std::move(records), session::PeerInfo{std::move(peer.description), peer.unixSocket, std::move(peer.tlsSubject)},
                                                services_, id, draining_);
    {
      std::lock_guard lock(mutex_);
      sessions_.emplace(id, s);
      slots_.emplace(id, std::move(slot));  // given back when the session has ended
    }
    s->start([this](session::Session& ended) {
      std::lock_guard lock(mutex_);
      sessions_.erase(ended.tenantId());
      slots_.erase(ended.tenantId());
    });
  }

  std::vector<char> refusalFrame(const std::string& why) override {
    capnp::MallocMessageBuilder message;
    session::buildRefusal(message, why);
    std::vector<char> bytes;
    frame::appendFrame(bytes, capnp::messageToFlatArray(message), 0);
    return bytes;
  }

  // The shared context is lost: every tenant is told what its calls return from now on, and the
  // notices are given a moment to leave before tallyd starts over.
  void tellContextLost(const gpu::FaultVerdict& verdict) {
    std::vector<std::shared_ptr<session::Session>> live = liveSessions();
    for (auto& s : live) s->tellContextLost(verdict);
    auto deadline = std::chrono::steady_clock::now() + kNoticeGrace;
    for (auto& s : live) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      s->drainOutbox(std::max(left, std::chrono::milliseconds(0)));
    }
  }

  void onStop() override {
    std::map<uint64_t, std::shared_ptr<session::Session>> live;
    {
      std::lock_guard lock(mutex_);
      live = sessions_;
    }
    for (auto& [id, s] : live) s->stop();
    for (auto& [id, s] : live) s->join();
  }

  // tally::server::admin::SessionSource
  std::vector<std::shared_ptr<session::Session>> liveSessions() override {
    std::lock_guard lock(mutex_);
    std::vector<std::shared_ptr<session::Session>> live;
    for (auto& [id, s] : sessions_) live.push_back(s);
    return live;
  }

 private:
  session::SessionServices& services_;
  const std::atomic<bool>& draining_;
  std::atomic<uint64_t> nextTenantId_{1};
  std::mutex mutex_;
  std::map<uint64_t, std::shared_ptr<session::Session>> sessions_;
  std::map<uint64_t, transport::ConnectionSlot> slots_;
};

bool isLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// The listeners of `config`: endpoints parsed, plain TCP only on loopback unless allowed, the
// TLS context loaded (its failure goes to `tlsError`, the caller decides).
bool listenOptionsFor(const Config& config, transport::ListenOptions& options, std::string& error,
                      std::string& tlsError) {
  options.unixSocketMode = config.unixSocketMode;
  options.maxConnections = config.maxConnections;
  options.handshakeTimeoutMs = config.handshakeTimeoutMs;
  for (const std::string& text : config.listen) {
    auto endpoint = address::parseEndpoint(text, error);
    if (!endpoint) return false;
    if (endpoint->kind == address::Endpoint::Kind::kTcp && !isLoopback(endpoint->host) && !config.allowPlainTcp) {
      error = text + ": plain TCP carries tokens and data in clear; use tls://, or a loopback address, or set "
                     "allow_plain_tcp = true";
      return false;
    }
    options.endpoints.push_back(*endpoint);
  }
  if (!config.tlsCert.empty() || !config.tlsKey.empty()) {
    options.tls = tls::Context::forServer({config.tlsCert, config.tlsKey, config.tlsClientCa}, tlsError);
  }
  return true;
}

// A crash of tallyd takes every tenant with it: leave a backtrace in the journal.
void onFatalSignal(int signum) {
  void* frames[64];
  int count = ::backtrace(frames, 64);
  const char header[] = "tallyd: fatal signal, backtrace:\n";
  (void)!::write(STDERR_FILENO, header, sizeof(header) - 1);
  ::backtrace_symbols_fd(frames, count, STDERR_FILENO);
  std::signal(signum, SIG_DFL);
  std::raise(signum);
}

// After a fault: tells every tenant, records the fault, and starts tallyd over (restart.h).
void recoverFrom(const gpu::FaultVerdict& verdict, SessionRegistry& registry, session::FaultHistory& history) {
  auto started = std::chrono::steady_clock::now();
  registry.tellContextLost(verdict);
  std::vector<std::string> culprits;
  if (verdict.certain) {
    for (const auto& [id, name] : verdict.culprits) culprits.push_back(name);
  }
  history.record(culprits, verdict.reason, verdict.at);
  spdlog::error("GPU fault: {} tenant(s) told in {:.0f} ms; {} fault(s) since tallyd first started", verdict.tenantsAffected,
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count(),
                history.total());
  startOver(history.serialize());
  std::_Exit(75);  // exec failed: systemd (Restart=on-failure) starts a fresh tallyd instead
}

int run(int argc, char** argv) {
  auto startedAt = std::chrono::steady_clock::now();
  rememberCommandLine(argc, argv);
  for (int s : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) std::signal(s, onFatalSignal);
  std::signal(SIGPIPE, SIG_IGN);
  CommandLine flags;
  if (std::optional<int> exit = parseCommandLine(argc, argv, flags)) return *exit;
  Config config;
  std::string error;
  if (!flags.configPath.empty() && !loadConfigFile(flags.configPath, config, error)) {
    std::fprintf(stderr, "tallyd: %s\n", error.c_str());
    return 2;
  }
  if (!applyCommandLine(flags, config, error)) {
    std::fprintf(stderr, "tallyd: %s\n", error.c_str());
    return 2;
  }
  const bool checkConfig = flags.checkConfig;
  log::setup("tallyd", config.logLevel, spdlog::level::info);

  transport::ListenOptions listenOptions;
  // With --check-config unusable TLS files only warn: they may exist only on the GPU host.
  std::string tlsError;
  if (!listenOptionsFor(config, listenOptions, error, tlsError)) {
    spdlog::error("{}", error);
    return 2;
  }
  if (!tlsError.empty() && !checkConfig) {
    spdlog::error("TLS: {}", tlsError);
    return 2;
  }
  if (checkConfig) {
    if (!tlsError.empty()) spdlog::warn("TLS files not usable here: {}", tlsError);
    std::printf("tallyd: configuration OK (%zu listener%s, policy %s, transform %s, %zu tenant rule%s)\n",
                listenOptions.endpoints.size(), listenOptions.endpoints.size() == 1 ? "" : "s",
                config.scheduler.policy.c_str(), config.transform.c_str(), config.auth.tenants.size(),
                config.auth.tenants.size() == 1 ? "" : "s");
    return 0;
  }

  gpu::Gpu::requestHardwareQueues(config.hardwareQueues);
  std::vector<std::unique_ptr<gpu::Gpu>> gpus = gpu::Gpu::openAll(error);
  if (gpus.empty()) {
    spdlog::error("no GPU is visible to tallyd: {}. Clients will be refused until tallyd restarts on a GPU host.", error);
  }
  gpu::ModuleStore modules(config.moduleCacheBytes);
  // What the request handlers share, and what each session needs (session/ never sees api/).
  api::ApiServices apiServices;
  library::setLibraryDirectory(config.libraryDir);
  if (!config.traceCalls.empty() && !trace::enableCallTrace(config.traceCalls, "tallyd")) {
    spdlog::error("trace_calls: cannot open {}", config.traceCalls);
  }
  session::SessionServices services;
  for (auto& g : gpus) services.gpus.push_back(g.get());
  apiServices.gpus = services.gpus;
  apiServices.modules = &modules;
  apiServices.inlineWaitMicros = config.inlineWaitMicros;
  apiServices.highPriorityInlineWaitMicros = config.highPriorityInlineWaitMicros;
  api::Dispatcher dispatcher(apiServices);
  services.calls = &dispatcher;
  services.limits.maxMessageBytes = config.maxMessageBytes;
  services.limits.maxBulkBytes = config.maxBulkBytes;
  services.pollMicros = config.pollMicros;
  services.highPriorityPollMicros = config.highPriorityPollMicros;
  services.bestEffortNice = config.bestEffortNice;
  services.sharedRings = config.sharedRings;
  services.highPriorityLaunchThread = config.highPriorityLaunchThread;
  session::LaneRegistry lanes;
  services.lanes = &lanes;
  services.maxBulkLanes = config.bulkLanes;
  services.handshakeTimeoutMs = config.handshakeTimeoutMs;
  services.auth = config.auth;
  if (config.transform == "stress" && !gpus.empty()) {
    config.scheduler.stress = true;
    config.scheduler.stressSeed = config.stressSeed != 0 ? config.stressSeed : std::random_device{}();
  }
  std::unique_ptr<scheduler::Policy> policyImpl = scheduler::makePolicy(config.scheduler, services.gpus, error);
  if (!policyImpl) {
    spdlog::error("{}", error);
    return 2;
  }
  services.policy = apiServices.policy = policyImpl.get();
  session::HangupWatch hangups;
  services.hangups = &hangups;
  if (config.scheduler.policy == "priority") {
    const auto& c = config.scheduler;
    spdlog::info(
        "scheduler: priority (gate {}, transforms {}, stream priorities {}, HP chaining {}, budget {} µs, idle window "
        "{} µs)",
        c.gate ? "on" : "off", c.transforms ? "on" : "off", c.streamPriorities ? "on" : "off",
        scheduler::hpChainName(c.hpChain), c.budgetMicros, c.idleWindowMicros);
  }
  std::optional<transform::VariantStore> variants;
  if (config.transform != "off" && !gpus.empty()) {
    int driverVersion = 0;
    cuDriverGetVersion(&driverVersion);
    variants.emplace(config.cacheDir, driverVersion,
                     config.transform == "stress" ? transform::VariantStore::Mode::kWait
                                                  : transform::VariantStore::Mode::kLazy);
    apiServices.variants = &*variants;
    spdlog::info("kernel transforms {} (best-effort variants; chained HP kernels under the priority policy), compiled "
                 "variants in {}{}",
                 config.transform,
                 config.cacheDir,
                 config.scheduler.stress ? fmt::format(" (STRESS MODE, seed {})", config.scheduler.stressSeed) : "");
  }
  spdlog::info("{} tenant rule{}, authentication {}; at most {} connections, {} ms for a handshake",
               config.auth.tenants.size(), config.auth.tenants.size() == 1 ? "" : "s",
               config.auth.requireAuth ? "required" : "optional", config.maxConnections, config.handshakeTimeoutMs);

  session::FaultHistory faultHistory(config.quarantine);
  if (std::string previous = takeFaultHistory(); !previous.empty()) {
    if (faultHistory.parse(previous)) {
      spdlog::warn("tallyd started over after a GPU fault: {} (faults so far: {})", faultHistory.lastSummary(),
                   faultHistory.total());
    } else {
      spdlog::warn("ignoring an unreadable fault history from the previous tallyd");
    }
  }
  services.faultHistory = &faultHistory;

  std::atomic<bool> draining{false};
  SessionRegistry registry(services, draining);
  // Created after the registry it tells, destroyed before it.
  std::optional<gpu::FaultMonitor> faultMonitor;
  if (!gpus.empty()) {
    gpu::FaultMonitor::Options faultOptions;
    faultOptions.kernelTimeoutSeconds = config.kernelTimeoutSeconds;
    faultMonitor.emplace(faultOptions, services.gpus, [&registry, &faultHistory](const gpu::FaultVerdict& v) {
      recoverFrom(v, registry, faultHistory);
    });
    services.faults = apiServices.faults = &*faultMonitor;
  }
  transport::Listener listener(listenOptions, registry);
  if (!listener.bind(error)) {
    spdlog::error("{}", error);
    return 1;
  }
  // What the control socket and the metrics endpoint look at.
  auto adminState = [&] {
    std::vector<std::string> gpuNames;
    for (auto& g : gpus) gpuNames.push_back(g->description().name);
    auto kept = [policy = services.policy, gpus = services.gpus](size_t i) {
      return i < gpus.size() ? policy->smsKeptFromBestEffort(*gpus[i]) : 0u;
    };
    auto streams = [gpus = services.gpus](size_t i) { return i < gpus.size() ? gpus[i]->liveStreams() : 0u; };
    return admin::AdminState{std::move(gpuNames), startedAt, draining, registry, &faultHistory, kept, streams,
                             gpu::Gpu::hardwareQueues()};
  };
  // Destroyed before the registry: no admin request outlives the sessions it looks at.
  std::optional<admin::AdminServer> adminServer;
  if (!config.adminSocket.empty()) {
    adminServer.emplace(config.adminSocket, adminState());
    // tallyd still serves tenants without its control socket (e.g. two tallyds, one default path).
    if (!adminServer->start(error)) {
      spdlog::error("{}; tallyctl cannot reach this tallyd", error);
      adminServer.reset();
    }
  }
  std::optional<admin::MetricsServer> metrics;
  if (!config.metricsListen.empty()) {
    size_t colon = config.metricsListen.rfind(':');
    int port = colon == std::string::npos ? -1 : std::atoi(config.metricsListen.c_str() + colon + 1);
    if (port <= 0 || port > 65535) {
      spdlog::error("metrics_listen '{}': expected HOST:PORT", config.metricsListen);
      return 2;
    }
    metrics.emplace(config.metricsListen.substr(0, colon), static_cast<uint16_t>(port), adminState());
    if (!metrics->start(error)) {
      spdlog::error("{}", error);
      return 1;
    }
  }
  spdlog::info("tallyd ready ({} GPU{})", gpus.size(), gpus.size() == 1 ? "" : "s");
  listener.run();
  spdlog::info("scheduler {}", services.policy->summary());
  spdlog::info("tallyd stopped");
  return 0;
}

}  // namespace
}  // namespace tally::server

int main(int argc, char** argv) { return tally::server::run(argc, argv); }
