@0x997b25604927b861;
# tallyd's local control socket (admin_socket; tallyctl is its client). Same framing as the
# tenant protocol (common/frame), no bulk bytes: one AdminRequest, one AdminReply, then tallyd
# closes the connection. Only local users who can open the socket (mode 0600) reach it.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tally::wire");

struct AdminRequest {
  union {
    status @0 :Void;
    tenants @1 :Void;
    stats @2 :Void;
    drain @3 :Bool;       # true: refuse new tenants ("tallyd is draining"); false: admit again
    evict @4 :UInt64;     # tenant id: stop its session; its resources are freed as on a disconnect
  }
}

struct GpuSummary {
  ordinal @0 :UInt32;
  name @1 :Text;
}

struct ServerStatus {
  version @0 :Text;
  uptimeSeconds @1 :UInt64;
  gpus @2 :List(GpuSummary);
  draining @3 :Bool;
  tenantCount @4 :UInt32;
  faults @5 :UInt64;              # faults of a shared context since tallyd first started (it starts over after each)
  lastFault @6 :Text;             # tallyd's account of the latest one; empty: none
  faultsByTenant @7 :List(TenantFaults);
}

struct TenantFaults {
  name @0 :Text;
  faults @1 :UInt64;              # faults blamed on it (it was the only tenant named)
  refusedForSeconds @2 :UInt64;   # > 0: refused that much longer (fault_quarantine_s)
}

struct TenantInfo {
  id @0 :UInt64;
  name @1 :Text;
  peer @2 :Text;                  # "unix pid=… uid=… gid=…" or "tcp HOST:PORT"
  highPriority @3 :Bool;          # false: best effort
  deviceMemoryBytes @4 :UInt64;
  streams @5 :UInt32;             # created streams (the legacy default streams do not count)
  connectedSinceUnix @6 :Int64;   # seconds since the epoch
  busyIn @7 :Text;                # the call its thread is in ("release" while it ends); empty: idle
  busySeconds @8 :Float64;        # for how long
  hostCallbacksOwed @9 :UInt32;   # stream waits on host callbacks not done yet (host_waits.h)
}

struct TenantStats {
  id @0 :UInt64;
  name @1 :Text;
  calls @2 :UInt64;               # calls dispatched
  launches @3 :UInt64;
  bytesHostToDevice @4 :UInt64;   # memcpy bytes asked for, by direction
  bytesDeviceToHost @5 :UInt64;
  slicedLaunches @6 :UInt64;      # launches run as kernel variants (server/transform)
  ptbLaunches @7 :UInt64;
  preemptions @8 :UInt64;         # PTB retreat points set (stress mode)
  heldLaunches @9 :UInt64;        # best-effort launches the scheduler held back ...
  heldMicros @10 :UInt64;         # ... for this long in total ...
  heldHistogram @11 :List(UInt64);  # ... < 10 µs, < 100 µs, < 1 ms, < 10 ms, longer
  throttledMicros @12 :UInt64;    # time its calls waited for its max_calls_per_second
  syncWaits @13 :UInt64;          # synchronizing calls answered after waiting for the GPU ...
  syncWaitMicros @14 :UInt64;     # ... and their total wait (arrival to answer)
  chainedLaunches @15 :UInt64;    # high-priority launches run as chained variants (docs/scheduler.md, layer 6)
}

struct AdminReply {
  ok @0 :Bool;
  error @1 :Text;                 # why not ok
  union {
    none @2 :Void;                # drain, evict, or an error
    status @3 :ServerStatus;
    tenants @4 :List(TenantInfo);
    stats @5 :List(TenantStats);
  }
}
