@0xe41e85860ab0a084;
# Streams and events. Handles are chosen by the client (so creation is one-way) and are
# private to the tenant; the server maps them to its own CUstream/CUevent.
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tally::wire");

struct StreamCreate {
  device @0 :UInt32;
  stream @1 :UInt64;
  nonBlocking @2 :Bool;
  priority @3 :Int32;
}

struct StreamRef {
  stream @0 :UInt64;
}

struct StreamWaitEvent {
  stream @0 :UInt64;
  event @1 :UInt64;
}

struct EventCreate {
  device @0 :UInt32;
  event @1 :UInt64;
  flags @2 :UInt32;               # CU_EVENT_* flags
}

struct EventRef {
  event @0 :UInt64;
}

struct EventRecord {
  event @0 :UInt64;
  stream @1 :UInt64;
}

struct EventElapsedTime {
  start @0 :UInt64;
  end @1 :UInt64;
}

struct HostFunc {
  # A host callback runs in the client process; later work on the stream waits for it.
  stream @0 :UInt64;
  callback @1 :UInt64;            # opaque to the server, echoed in HostFuncReady
  # Clients sharing memory with tallyd (Unix sockets) pass two u32 words of a registered
  # shared region instead: the stream writes `sharedSequence` to `reachedWord` when it gets
  # there, then waits until `doneWord` >= it; the client polls and writes them itself. No
  # HostFuncReady/HostFuncDone then, so no tallyd thread stands between the GPU and the
  # callback (a context-wide driver call waiting for this stream cannot deadlock on it).
  reachedWord @2 :UInt64;         # client address; 0: use the messages
  doneWord @3 :UInt64;
  sharedSequence @4 :UInt32;
}

struct HostFuncReady {
  stream @0 :UInt64;
  sequence @1 :UInt64;
  callback @2 :UInt64;
}

struct HostFuncDone {
  stream @0 :UInt64;
  sequence @1 :UInt64;
}

struct StreamMemOp {
  # One stream memory operation, as CUstreamBatchMemOpParams has it.
  operation @0 :UInt32;           # CUstreamBatchMemOpType (CU_STREAM_MEM_OP_*)
  address @1 :UInt64;             # device address of the word (wait/write operations)
  value @2 :UInt64;               # the 32- or 64-bit operand
  flags @3 :UInt32;               # CU_STREAM_WAIT_VALUE_* / CU_STREAM_WRITE_VALUE_* / barrier scope
}

struct StreamMemOps {
  # cuStreamWaitValue32/64 and cuStreamWriteValue32/64 (one operation) and cuStreamBatchMemOp
  # (several), one-way and stream-ordered like a memset. Every address must lie in memory the
  # tenant may use; a refusal is the tenant's deferred CUDA_ERROR_INVALID_VALUE.
  stream @0 :UInt64;
  ops @1 :List(StreamMemOp);
}
