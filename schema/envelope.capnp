@0xf63ede8991a94936;
# The wire contract between libtally_client.so and tallyd.
#
# Framing (common/frame): every frame is a 12-byte header {u32 magic, u32 messageBytes,
# u32 bulkBytes} followed by one Cap'n Proto message (flat, unpacked) and then `bulkBytes`
# raw bytes. Bulk bytes carry memcpy payloads and module images so that neither side copies
# them into a message: the receiver reads them straight into their destination.
#
# One connection is one tenant. The client speaks first with Hello; the server answers
# Welcome (accepted or not) and from then on the client sends Calls and the server sends
# Replies plus unsolicited notices (HostData, HostFuncReady).

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tally::wire");

using Device = import "device.capnp";
using Memory = import "memory.capnp";
using Stream = import "stream.capnp";
using Module = import "module.capnp";
using Launch = import "launch.capnp";
using Graph = import "graph.capnp";
using Library = import "library.capnp";
using MemoryExt = import "memory_ext.capnp";
using Array = import "array.capnp";

const protocolVersion :UInt32 = 3;  # 2: module hashes are SHA-256 (32 bytes); 3: library calls

enum PriorityClass {
  highPriority @0;   # latency-critical (inference)
  bestEffort @1;     # throughput (training)
}

struct Hello {
  protocolVersion @0 :UInt32;
  tenantName @1 :Text;
  priority @2 :PriorityClass;
  authToken @3 :Data;
  clientHost @4 :Text;
  clientPid @5 :UInt32;
  cudaRuntimeVersion @6 :Int32;   # CUDART_VERSION the client was built against
  restrictDevices @7 :Bool;       # CUDA_VISIBLE_DEVICES is set (false: every GPU of tallyd)
  visibleDevices @8 :List(Text);  # its entries, split at commas: ordinals or GPU UUIDs
  sharedRingBytes @9 :UInt32;     # UDS: the Hello carries a ring file (common/frame/shared_ring.h)
                                  # with two rings of this many bytes; 0: none
  bulkLanes @10 :UInt8;           # TCP/TLS: extra connections the client would open for the bytes
                                  # of large copies (JoinLane); 0: none
}

struct Welcome {
  accepted @0 :Bool;
  error @1 :Text;                 # why not accepted
  protocolVersion @2 :UInt32;
  tenantId @3 :UInt64;
  driverVersion @4 :Int32;
  devices @5 :List(Device.DeviceInfo);
  sharedHostMemory @6 :Bool;      # server maps client pinned memory passed as memfd (UDS only)
  refusalStatus @7 :Int32;        # accepted = false: the CUresult the client reports (0: no device)
  sharedRing @8 :Bool;            # the ring file is mapped: every later frame goes through it
  bulkLanes @9 :UInt8;            # bulk lanes granted (at most Hello.bulkLanes); 0: none
  laneKey @10 :Data;              # the secret a lane presents in JoinLane
}

struct JoinLane {
  # The first message of a bulk lane: another connection of an admitted tenant over the same
  # transport, which carries only the bytes of large copies (LaneData both ways). tallyd answers
  # with a Welcome (accepted, or refused saying why).
  tenantId @0 :UInt64;            # Welcome.tenantId of the tenant's connection
  key @1 :Data;                   # Welcome.laneKey
  index @2 :UInt8;                # 0 .. Welcome.bulkLanes - 1, each joined once
}

struct Call {
  # id == 0: one-way (stream-ordered) call; its error, if any, surfaces at the tenant's next
  # synchronizing call. id != 0: the server answers with a Reply carrying the same id.
  id @0 :UInt64;
  union {
    memAlloc @1 :Memory.MemAlloc;
    memFree @2 :Memory.MemFree;
    memcpy @3 :Memory.Memcpy;
    memset @4 :Memory.Memset;
    memGetInfo @5 :Memory.MemGetInfo;
    hostRegister @6 :Memory.HostRegister;      # memfd travels as SCM_RIGHTS ancillary data
    hostUnregister @7 :Memory.HostUnregister;

    streamCreate @8 :Stream.StreamCreate;
    streamDestroy @9 :Stream.StreamRef;
    streamSynchronize @10 :Stream.StreamRef;
    streamQuery @11 :Stream.StreamRef;
    streamWaitEvent @12 :Stream.StreamWaitEvent;
    eventCreate @13 :Stream.EventCreate;
    eventDestroy @14 :Stream.EventRef;
    eventRecord @15 :Stream.EventRecord;
    eventQuery @16 :Stream.EventRef;
    eventSynchronize @17 :Stream.EventRef;
    eventElapsedTime @18 :Stream.EventElapsedTime;
    deviceSynchronize @19 :Device.DeviceRef;
    hostFunc @20 :Stream.HostFunc;
    hostFuncDone @21 :Stream.HostFuncDone;

    moduleLoad @22 :Module.ModuleLoad;
    moduleUnload @23 :Module.ModuleRef;
    moduleGetFunction @24 :Module.ModuleGetFunction;
    moduleGetGlobal @25 :Module.ModuleGetGlobal;
    funcSetAttribute @26 :Module.FuncSetAttribute;
    occupancy @27 :Module.Occupancy;

    launchKernel @28 :Launch.LaunchKernel;

    setLimit @29 :Device.Limit;
    getLimit @30 :Device.Limit;

    library @31 :Library.LibraryCall;   # cuBLAS/cuBLASLt/cuDNN; Reply.status is the library's status

    streamBeginCapture @32 :Graph.BeginCapture;          # Reply.value: the capture id
    streamEndCapture @33 :Graph.EndCapture;
    graphInstantiate @34 :Graph.GraphInstantiate;
    graphLaunch @35 :Graph.GraphLaunch;                  # one-way, stream-ordered
    graphUpload @36 :Graph.GraphLaunch;                  # one-way, stream-ordered
    graphDestroy @37 :Graph.GraphRef;
    graphExecDestroy @38 :Graph.GraphExecRef;
    graphGetNodes @39 :Graph.GraphRef;                   # Reply.graph.nodeTypes
    graphKernelNodeGetParams @40 :Graph.GraphNodeRef;    # Reply.graph.kernelNode
    graphKernelNodeSetParams @41 :Graph.KernelNodeSetParams;
    graphCreate @42 :Graph.GraphCreate;
    graphAddKernelNode @43 :Graph.AddKernelNode;         # Reply.value: the node id
    graphAddMemcpyNode @44 :Graph.AddMemcpyNode;         # Reply.value: the node id
    graphAddDependencies @45 :Graph.AddDependencies;

    # Memory pools, virtual memory management, IPC (memory_ext.capnp).
    memPool @46 :MemoryExt.MemPoolCall;
    virtualMemory @47 :MemoryExt.VirtualMemoryCall;
    ipc @48 :MemoryExt.IpcCall;

    tensorMapEncodeTiled @49 :Module.TensorMapEncodeTiled;  # Reply.tensorMap

    streamMemOps @50 :Stream.StreamMemOps;               # one-way, stream-ordered

    graphAddNode @51 :Graph.AddNode;                     # Reply.value: the node id
    graphGetEdges @52 :Graph.GraphRef;                   # Reply.graph.edges
    graphRemoveDependencies @53 :Graph.AddDependencies;
    graphDestroyNode @54 :Graph.GraphNodeRef;
    graphClone @55 :Graph.GraphClone;
    graphMemsetNodeGetParams @56 :Graph.GraphNodeRef;    # Reply.graph.memsetNode
    graphMemsetNodeSetParams @57 :Graph.MemsetNodeSetParams;
    graphNodeGetEnabled @58 :Graph.ExecNodeRef;          # Reply.value: 1 if enabled
    graphNodeSetEnabled @59 :Graph.NodeSetEnabled;

    linkCreate @60 :Module.LinkCreate;                   # Reply.link (logs)
    linkAddData @61 :Module.LinkAddData;                 # Reply.link (logs)
    linkComplete @62 :Module.LinkRef;                    # Reply.link (logs, image)
    linkDestroy @63 :Module.LinkRef;                     # one-way

    # CUDA arrays, texture and surface objects (array.capnp).
    arrayCreate @64 :Array.ArrayCreate;
    arrayDestroy @65 :Array.ArrayRef;
    arrayCopy @66 :Array.ArrayCopy;                      # one-way when asynchronous
    textureCreate @67 :Array.TextureCreate;              # Reply.value: the texture object
    textureDestroy @68 :Array.ObjectRef;
    surfaceCreate @69 :Array.SurfaceCreate;              # Reply.value: the surface object
    surfaceDestroy @70 :Array.ObjectRef;
    mipmappedArrayCreate @71 :Array.MipmappedArrayCreate;
    mipmappedArrayGetLevel @72 :Array.MipmappedArrayGetLevel;  # Reply.arrayDescriptor
    mipmappedArrayDestroy @73 :Array.ArrayRef;

    moduleFunctionNames @74 :Module.ModuleRef;           # Reply.functionNames
    graphExecUpdate @75 :Graph.GraphExecUpdate;          # Reply.graph.execUpdate
  }

  completionSlot @76 :UInt32;
  # Non-zero, over a Unix socket with shared rings: the call's completion word is word
  # completionSlot - 1 of the ring file (SharedRings::completionWord). A synchronizing call whose
  # reply would carry nothing but success may have the server store the call id's low 32 bits
  # there once the work is done, before the Reply (which still follows); the client may return
  # as soon as it sees them.
}

struct Reply {
  id @0 :UInt64;
  status @1 :Int32;               # CUresult of this call
  deferredStatus @2 :Int32;       # first error of an earlier one-way call, reported once
  dataToken @10 :UInt64;          # non-zero: the frame's bulk bytes are device-to-host data
                                  # for this HostData token (small synchronous copies)
  union {
    none @3 :Void;
    value @4 :UInt64;             # pointer, handle, count, flag
    memInfo @5 :Memory.MemInfo;
    moduleLoad @6 :Module.ModuleLoadResult;
    function @7 :Module.FunctionInfo;
    global @8 :Module.GlobalInfo;
    elapsedMs @9 :Float32;
    libraryOut @11 :Data;         # a library call's outputs, in parameter order
    graph @12 :Graph.GraphReply;  # graphGetNodes, graphKernelNodeGetParams
    tensorMap @13 :Data;          # the 128 bytes of an encoded CUtensorMap
    link @14 :Module.LinkResult;  # linkCreate, linkAddData, linkComplete
    arrayDescriptor @15 :Array.ArrayDescriptor;  # mipmappedArrayGetLevel: the level's descriptor
    functionNames @16 :List(Text);  # moduleFunctionNames: the module's kernels, in the driver's order
  }
}

struct HostData {
  # Bulk bytes of a device-to-host copy, to be written at `offset` into the client buffer the
  # client registered under `token` (never a raw client address: the client checks bounds).
  token @0 :UInt64;
  offset @1 :UInt64;
}

struct ClientMessage {
  union {
    hello @0 :Hello;
    calls @1 :List(Call);         # executed in order
    joinLane @2 :JoinLane;        # a bulk lane's first message
    laneData @3 :HostData;        # on a bulk lane: bytes of a host-to-device copy sent with
                                  # Memcpy.viaLanes, at `offset` of the copy whose token it names
  }
}

struct ContextLost {
  # A kernel faulted (or ran past kernel_timeout_s) and the GPU's shared context is lost for every
  # tenant; tallyd starts over and closes this connection. Every later call of this client returns
  # `status`: the native error for the faulting tenant, CUDA_ERROR_CONTEXT_IS_DESTROYED for the others.
  status @0 :Int32;
  faultingTenants @1 :List(Text);   # names; empty when tallyd could not tell
  reason @2 :Text;                  # tallyd's one-line account, for the client's log
}

struct ServerMessage {
  union {
    welcome @0 :Welcome;
    reply @1 :Reply;
    hostData @2 :HostData;
    hostFuncReady @3 :Stream.HostFuncReady;
    contextLost @4 :ContextLost;
  }
}
