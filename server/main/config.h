// tallyd's configuration: defaults, then the TOML file, then command-line flags.
#pragma once

#include "server/scheduler/policy.h"

#include "server/session/auth.h"
#include "server/session/fault_history.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tally::server {

struct Config {
  std::vector<std::string> listen{"unix:/run/tally/tallyd.sock"};
  std::string adminSocket = "/run/tally/tallyd-admin.sock";  // control socket path; empty: none
  std::string logLevel = "info";
  unsigned unixSocketMode = 0660;
  std::string tlsCert, tlsKey, tlsClientCa;  // tls:// listeners: PEM files; client_ca requires client certificates
  bool allowPlainTcp = false;               // tcp:// listeners on non-loopback addresses
  std::string metricsListen;                // "HOST:PORT" of the Prometheus endpoint; empty: none
  uint64_t moduleCacheBytes = 4ull << 30;
  uint32_t maxMessageBytes = 1u << 20;
  uint32_t maxBulkBytes = 64u << 20;
  unsigned inlineWaitMicros = 2000;
  unsigned highPriorityInlineWaitMicros = 2000;
  unsigned pollMicros = 50;
  unsigned highPriorityPollMicros = 20000;
  // A best-effort tenant's thread runs this much nicer than tallyd (0-19; 0: as nice): when the
  // host's cores are short, high-priority tenants' threads (which poll) run first.
  unsigned bestEffortNice = 5;
  // Hardware work queues the driver gives each GPU of this process (CUDA_DEVICE_MAX_CONNECTIONS,
  // 1-32; 0: the environment's setting, else the driver's 8). Every tenant's streams are this
  // process's: past this many live streams a new stream shares a queue, and waits behind the
  // other's queued kernels whatever their priorities (bench/micro/queue_sharing_probe). More
  // queues cost every HP round trip ~1-10 µs on the H200, and the driver put new streams beside
  // idle ones, so 0 (docs/scheduler.md, "Hardware queues").
  unsigned hardwareQueues = 0;
  // Unix-socket tenants' frames go through the shared rings they offer (common/frame/shared_ring.h).
  bool sharedRings = true;
  bool highPriorityLaunchThread = true;  // hp_launch_thread (session/launch_thread.h)
  // Extra connections a TCP/TLS tenant may open for the bytes of large copies (0-8; 0: none):
  // one thread per side cannot seal, send and open them as fast as several (bulk_lanes.h).
  unsigned bulkLanes = 4;
  // A peer that has not completed its Hello this long after connecting (TLS handshake
  // included) is dropped: an unauthenticated peer must not hold a thread for good.
  unsigned handshakeTimeoutMs = 5000;
  // Connections held at once (handshakes, tenants, tenants being released); over it a new one
  // is refused with the reason before any thread is started for it.
  unsigned maxConnections = 256;
  session::AuthPolicy auth;  // require_auth and the [[tenant]] rules
  // A tenant's launched work that has not completed after this long counts as a fault of the
  // shared context (gpu/fault_monitor.h); 0: no limit.
  unsigned kernelTimeoutSeconds = 0;
  session::QuarantineRule quarantine;  // tenants that fault again and again are refused a while
  // Kernel transforms for best-effort tenants: "off", "lazy" (compile in the background, use
  // the variants from the next load on) or "stress" (test aid: compile before the load returns
  // and run every launch as a random variant).
  std::string transform = "lazy";
  std::string cacheDir = "/var/cache/tally";  // compiled variants
  // Where cuBLAS/cuBLASLt/cuDNN are looked for first (then the loader's search path); e.g. the
  // lib directory of a PyTorch wheel's nvidia-cudnn package on a host without system cuDNN.
  std::string libraryDir;
  std::string traceCalls;  // per-call timestamps appended here (common/trace/call_trace.h); empty: off
  uint64_t stressSeed = 0;                    // 0: a new seed per run
  scheduler::SchedulerConfig scheduler;       // policy and its knobs
};

// The control socket's path from `text`: "unix:PATH" or a plain PATH; "" (no control socket)
// stays "". False with `error` for anything else (the control socket is Unix only).
bool parseAdminSocket(const std::string& text, std::string& path, std::string& error);

// Reads `path` over `config`; false with `error` on a bad file or an unknown key.
bool loadConfigFile(const std::string& path, Config& config, std::string& error);

}  // namespace tally::server
