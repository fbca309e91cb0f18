// What a session needs from the rest of tallyd, handed in by server/main: the GPUs, limits and
// rules of the handshake, the scheduler's per-tenant hooks, the fault monitor — and the
// CallHandler that runs each call (server/api's Dispatcher). session/ never includes api/: the
// API layer depends on the session's tenant state, not the other way round.
#pragma once

#include "common/frame/socket_io.h"
#include "schema/envelope.capnp.h"
#include "server/gpu/fault_monitor.h"
#include "server/gpu/gpu.h"
#include "server/scheduler/policy.h"
#include "server/session/auth.h"
#include "server/session/fault_history.h"
#include "server/session/hangup_watch.h"
#include "server/session/outbox.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tally::server::session {

class Tenant;
class LaneRegistry;

// One call as the session hands it to the API layer.
struct IncomingCall {
  Tenant& tenant;
  const std::shared_ptr<Outbox>& outbox;      // the way back to the client
  frame::StreamReader& reader;                // bulk bytes that follow the message
  uint32_t& bulkLeft;                         // ... and how many of them no call has taken yet
  wire::Call::Reader call;
  const std::shared_ptr<gpu::FaultEvidence>& evidence;  // null without a fault monitor
  bool moreInFrame = false;                   // calls of the same message follow this one
};

class CallHandler {
 public:
  virtual ~CallHandler() = default;
  // Runs one call. Returns why the peer must be dropped (it proved broken or hostile), or "".
  virtual std::string run(const IncomingCall& call) = 0;
};

struct SessionServices {
  std::vector<gpu::Gpu*> gpus;
  frame::FrameLimits limits;
  unsigned pollMicros = 50;            // how long a tenant thread polls its socket before sleeping
  unsigned highPriorityPollMicros = 20000;  // ... a high-priority tenant's: its next request then costs no wake-up
  unsigned bestEffortNice = 5;  // how much nicer than tallyd a best-effort tenant's thread runs (best_effort_nice)
  bool sharedRings = true;             // Unix-socket tenants' rings are taken (shared_rings)
  bool highPriorityLaunchThread = true;  // HP tenants' launches get a thread of their own (hp_launch_thread)
  unsigned handshakeTimeoutMs = 5000;  // a peer without a complete Hello by then is dropped
  AuthPolicy auth;                     // who may connect, with which limits
  scheduler::Policy* policy = nullptr;  // stream priority bands, and the end of a tenant
  // Releases a dead tenant's host-callback waits while its thread is stuck (null: only at release).
  HangupWatch* hangups = nullptr;
  gpu::FaultMonitor* faults = nullptr;      // evidence per tenant (null: no monitor)
  FaultHistory* faultHistory = nullptr;     // who is refused for a while (null: nobody)
  CallHandler* calls = nullptr;             // never null once a session runs
  LaneRegistry* lanes = nullptr;            // tenants' bulk lanes (null: none are granted)
  unsigned maxBulkLanes = 4;                // lanes granted to a TCP/TLS tenant at most (bulk_lanes)
};

}  // namespace tally::server::session
