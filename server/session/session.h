// One client connection = one tenant. The session thread reads the tenant's calls in order
// and runs them without ever waiting on the GPU (waits go to the completion queues), so a
// tenant blocked in a sync still gets its other threads' launches executed.
#pragma once

#include "server/api/call_context.h"

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

namespace tally::server::session {

struct PeerInfo {
  std::string description;  // "unix pid=123 uid=0" or "tcp 127.0.0.1:5555"
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(int fd, PeerInfo peer, api::Services& services, uint64_t tenantId);
  ~Session();

  // Runs the session on its own thread; `onExit` is called from that thread at the end.
  void start(std::function<void(Session&)> onExit);
  // Asks the session to end (closes the socket); returns at once.
  void stop();
  void join();

  uint64_t tenantId() const { return tenantId_; }
  const PeerInfo& peer() const { return peer_; }

 private:
  void run();
  // What the handshake grants a peer that passed authentication and the priority rule.
  struct Admission {
    std::string name;
    PriorityClass priority;
    TenantLimits limits;
  };

  bool handshake(frame::StreamReader& reader);
  bool greet(frame::IncomingFrame& frame);
  // Authentication, then the priority rule; refuses the peer (and returns nullopt) if either fails.
  std::optional<Admission> admit(wire::Hello::Reader hello);
  bool serve(frame::StreamReader& reader);
  // Sends Welcome{accepted=false, error=why} and logs the peer, why and `detail`.
  void refuse(const std::string& why, const std::string& detail = {});

  int fd_;
  PeerInfo peer_;
  api::Services& services_;
  uint64_t tenantId_;
  std::shared_ptr<Outbox> outbox_;
  std::unique_ptr<Tenant> tenant_;
  std::function<void(Session&)> onExit_;
  std::thread thread_;
};

}  // namespace tally::server::session
