// One client connection = one tenant. The session thread reads the tenant's calls in order
// and runs them without ever waiting on the GPU (waits go to the completion queues), so a
// tenant blocked in a sync still gets its other threads' launches executed.
#pragma once

#include "common/frame/record_layer.h"
#include "server/session/session_services.h"
#include "server/session/tenant.h"
#include "server/session/call_rate_limit.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>

namespace tally::server::session {

struct PeerInfo {
  std::string description;  // "unix pid=123 uid=0", "tcp 127.0.0.1:5555" or "tls 127.0.0.1:5555 /CN=…"
  bool unixSocket = false;  // SO_PEERCRED and shared host memory (fd passing) apply only then
  std::string tlsSubject;   // a TLS peer's verified client certificate subject
};

// Fills `message` with the Welcome that refuses a peer, saying why: sent by the handshake, and
// by tallyd alone to a connection it starts no session for (max_connections).
void buildRefusal(capnp::MessageBuilder& message, const std::string& why, CUresult status = CUDA_SUCCESS);

class Session : public std::enable_shared_from_this<Session> {
 public:
  // While `draining` is true the handshake refuses new tenants ("tallyd is draining").
  // `records`: the TLS records `fd` carries (null: plain bytes).
  Session(int fd, std::unique_ptr<frame::RecordLayer> records, PeerInfo peer, SessionServices& services,
          uint64_t tenantId, const std::atomic<bool>& draining);
  ~Session();

  // Runs the session on its own thread; `onExit` is called from that thread at the end.
  void start(std::function<void(Session&)> onExit);
  // Asks the session to end (shuts the socket down); returns at once. Thread-safe.
  void stop();
  void join();

  uint64_t tenantId() const { return tenantId_; }

  // The shared context is lost (gpu/fault_monitor.h): tells the client what every later call of
  // it returns. From any thread; a peer not yet admitted is told nothing (it is refused anyway).
  void tellContextLost(const gpu::FaultVerdict& verdict);
  // Waits (at most `timeout`) until what was sent to the client is written.
  bool drainOutbox(std::chrono::milliseconds timeout);
  const PeerInfo& peer() const { return peer_; }

  // For the control socket, from any thread: the tenant once the handshake admitted it
  // (nullptr before). Read only what is fixed at admission (name, priority) and its counters().
  const Tenant* admittedTenant() const { return admitted_.load(std::memory_order_acquire) ? tenant_.get() : nullptr; }
  // When the handshake admitted the tenant; valid once admittedTenant() is not null.
  std::chrono::system_clock::time_point admittedAt() const { return admittedAt_; }

 private:
  void run();
  // What the handshake grants a peer that passed authentication and the priority rule.
  struct Admission {
    std::string name;
    PriorityClass priority;
    TenantLimits limits;
  };

  bool handshake(frame::StreamReader& reader);
  bool greet(frame::IncomingFrame& frame, frame::StreamReader& reader);
  // The client's ring file (common/frame/shared_ring.h), mapped; false: the socket it is.
  bool adoptRings(wire::Hello::Reader hello, frame::StreamReader& reader);
  // tallyd's GPUs this client's CUDA_VISIBLE_DEVICES selects, in its order.
  // The GPUs the tenant's CUDA_VISIBLE_DEVICES selects; `repeated`: it named one twice (invalid).
  std::vector<gpu::Gpu*> gpusFor(wire::Hello::Reader hello, bool& repeated) const;
  // Authentication, then the priority rule; refuses the peer (and returns nullopt) if either fails.
  std::optional<Admission> admit(wire::Hello::Reader hello);
  bool serve(frame::StreamReader& reader);
  // A JoinLane instead of a Hello: this connection becomes a bulk lane of an admitted tenant
  // (bulk_lanes.h) and serves it on this thread. Always false: a lane is no tenant.
  bool serveLane(frame::IncomingFrame& frame, frame::StreamReader& reader);
  // Bulk lanes for the tenant being admitted, if it asked for them and may have them.
  std::shared_ptr<BulkLanes> grantLanes(wire::Hello::Reader hello);
  void throttle();
  void endOfBurst();  // the scheduler's deferred work for this tenant, issued (Policy::endOfBurst)
  void drainLaunches();  // waits until the tenant's launch thread has made every launch it was given
  // Why the tenant `name` is refused for faulting the GPU too often; empty: it is not.
  std::string quarantineOf(const std::string& name) const;
  // Registers the connection with services_.hangups (0: none).
  uint64_t watchForHangup();
  // Sends Welcome{accepted=false, error=why} and logs the peer, why and `detail`.
  // Refuses the handshake; the client reports `status` (CUDA_ERROR_NO_DEVICE when 0).
  void refuse(const std::string& why, const std::string& detail = {}, CUresult status = CUDA_SUCCESS);

  int fd_;
  PeerInfo peer_;
  SessionServices& services_;
  uint64_t tenantId_;
  const std::atomic<bool>& draining_;
  std::shared_ptr<Outbox> outbox_;
  std::shared_ptr<frame::SharedRings> rings_;  // null: the tenant's frames use the socket
  std::unique_ptr<Tenant> tenant_;
  std::shared_ptr<gpu::FaultEvidence> faultEvidence_;
  CallRateLimit rateLimit_{0};
  bool throttleLogged_ = false;
  std::chrono::system_clock::time_point admittedAt_;
  std::atomic<bool> admitted_{false};  // publishes tenant_ and admittedAt_ to other threads
  std::function<void(Session&)> onExit_;
  std::thread thread_;
};

}  // namespace tally::server::session
