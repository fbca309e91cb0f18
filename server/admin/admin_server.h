// tallyd's local control socket (admin_socket; tallyctl is its client): status, the tenant
// list and per-tenant counters, drain/undrain, evict. Unix socket only, mode 0600, so only
// the user tallyd runs as (and root) can reach it; every action is logged with the peer's uid.
//
// It runs on its own small thread rather than on the libuv loop: the framing helpers
// (common/frame) are blocking, requests are one small frame each way, and a thread of its own
// keeps a slow or stuck admin peer (bounded by a 2 s socket timeout) from ever delaying the
// accepts of tenants on the loop thread. Requests are served one at a time.
#pragma once

#include "server/session/fault_history.h"
#include "server/session/session.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace tally::server::admin {

// What the control socket may see of tallyd's live sessions (SessionRegistry implements it).
class SessionSource {
 public:
  virtual ~SessionSource() = default;
  // A snapshot of the live sessions, in tenant id order; callable from any thread.
  virtual std::vector<std::shared_ptr<session::Session>> liveSessions() = 0;
};

// A live session whose handshake admitted its tenant (the session keeps the tenant alive).
struct Admitted {
  std::shared_ptr<session::Session> session;
  const session::Tenant* tenant;
};
std::vector<Admitted> admitted(SessionSource& source);

struct AdminState {
  std::vector<std::string> gpuNames;
  std::chrono::steady_clock::time_point startedAt;
  std::atomic<bool>& draining;  // read by every handshake
  SessionSource& sessions;
  const session::FaultHistory* faults = nullptr;  // null: none recorded
  // The SMs best-effort work is kept off on GPU i right now (the scheduler's reserve); null: none.
  std::function<unsigned(size_t gpu)> smsKeptFromBestEffort;
  // Tenants' driver streams on GPU i, and the hardware queues each GPU has; null: not exported.
  std::function<unsigned(size_t gpu)> liveStreams;
  unsigned hardwareQueues = 0;
};

class AdminServer {
 public:
  AdminServer(std::string path, AdminState state);
  ~AdminServer();  // stops the thread and removes the socket file
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // Binds the socket (mode 0600) and starts serving; false with `error` if it cannot. A live
  // socket of another tallyd at the same path is left alone; a stale one is replaced.
  bool start(std::string& error);

 private:
  void serve();
  void handle(int fd);

  std::string path_;
  AdminState state_;
  int listenFd_ = -1;
  int wakePipe_[2] = {-1, -1};  // written by the destructor to end serve()
  bool bound_ = false;
  std::thread thread_;
};

}  // namespace tally::server::admin
