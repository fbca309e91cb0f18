@0xff163402899bba47;
# Memory beyond cudaMalloc: the stream-ordered allocator (memory pools), virtual memory
# management (cuMemCreate / cuMemAddressReserve / cuMemMap) and CUDA IPC between tenants of one
# tallyd. Each family is one Call member holding a union, so the envelope grows by one line per
# family. Ids of pools, allocation handles and events are the client's (like stream ids); every
# device address is checked against the tenant's MemoryTable, as in memory.capnp.
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tally::wire");

# --- stream-ordered allocator ------------------------------------------------------------
# Pool id d + 1 (below 2^16) is the tenant's default pool of device d; larger ids are pools the
# client created with memPoolCreate.

struct MemPoolCall {
  union {
    create @0 :MemPoolCreate;
    destroy @1 :MemPoolRef;
    allocAsync @2 :MemAllocAsync;       # Reply.value: the address
    freeAsync @3 :MemFreeAsync;         # one-way: errors surface at the next sync
    setAttribute @4 :MemPoolAttribute;
    getAttribute @5 :MemPoolAttribute;  # Reply.value
    trimTo @6 :MemPoolTrim;
  }
}

struct MemPoolCreate {
  pool @0 :UInt64;
  device @1 :UInt32;
  maxSize @2 :UInt64;                   # 0: no limit (CUmemPoolProps.maxSize)
}

struct MemPoolRef {
  pool @0 :UInt64;
}

struct MemAllocAsync {
  pool @0 :UInt64;
  stream @1 :UInt64;
  size @2 :UInt64;
}

struct MemFreeAsync {
  ptr @0 :UInt64;
  stream @1 :UInt64;
}

struct MemPoolAttribute {
  pool @0 :UInt64;
  attribute @1 :UInt32;                 # CUmemPool_attribute
  value @2 :UInt64;                     # int attributes travel widened
}

struct MemPoolTrim {
  pool @0 :UInt64;
  minBytesToKeep @1 :UInt64;
}

# --- virtual memory management -----------------------------------------------------------
# Allocation handle ids are the client's; the CUmemGenericAllocationHandle stays in tallyd.

struct VirtualMemoryCall {
  union {
    granularity @0 :VmGranularity;      # Reply.value
    create @1 :VmCreate;
    release @2 :VmHandleRef;
    addressReserve @3 :VmReserve;       # Reply.value: the reserved base
    addressFree @4 :VmRange;
    map @5 :VmMap;
    unmap @6 :VmRange;
    setAccess @7 :VmSetAccess;
    getAccess @8 :VmGetAccess;          # Reply.value: CUmemAccess_flags
    retainHandle @9 :VmRetain;          # Reply.value: the handle id
  }
}

struct VmGranularity {
  device @0 :UInt32;
  recommended @1 :Bool;                 # CU_MEM_ALLOC_GRANULARITY_RECOMMENDED, else MINIMUM
}

struct VmCreate {
  handle @0 :UInt64;
  device @1 :UInt32;
  size @2 :UInt64;
  gpuDirectRdmaCapable @3 :Bool;
}

struct VmHandleRef {
  handle @0 :UInt64;
}

struct VmReserve {
  size @0 :UInt64;
  alignment @1 :UInt64;
  hint @2 :UInt64;
}

struct VmRange {
  ptr @0 :UInt64;
  size @1 :UInt64;
}

struct VmMap {
  ptr @0 :UInt64;
  size @1 :UInt64;
  offset @2 :UInt64;
  handle @3 :UInt64;
}

struct VmAccess {
  device @0 :UInt32;
  flags @1 :UInt32;                     # CUmemAccess_flags
}

struct VmSetAccess {
  ptr @0 :UInt64;
  size @1 :UInt64;
  access @2 :List(VmAccess);
}

struct VmGetAccess {
  ptr @0 :UInt64;
  device @1 :UInt32;
}

struct VmRetain {
  ptr @0 :UInt64;
}

# --- IPC between tenants of one tallyd ---------------------------------------------------
# A handle is 64 random bytes naming one grant in this tallyd (docs/security.md); it means
# nothing to another tallyd or to the native driver.

struct IpcCall {
  union {
    getMemHandle @0 :IpcGetMem;         # the handle comes back as Reply bulk for `token`
    openMemHandle @1 :IpcHandle;        # Reply.memInfo: (address, size) ride in (free, total)
    closeMemHandle @2 :IpcClose;
    getEventHandle @3 :IpcGetEvent;     # the handle comes back as Reply bulk for `token`
    openEventHandle @4 :IpcOpenEvent;
  }
}

struct IpcGetMem {
  ptr @0 :UInt64;
  token @1 :UInt64;                     # where the client takes the 64 handle bytes (Reply.dataToken)
}

struct IpcHandle {
  handle @0 :Data;                      # 64 bytes
}

struct IpcClose {
  ptr @0 :UInt64;
}

struct IpcGetEvent {
  event @0 :UInt64;
  token @1 :UInt64;
}

struct IpcOpenEvent {
  handle @0 :Data;
  event @1 :UInt64;                     # the receiver's id for the event it gets
}
