@0xf4a67514ce7b2b4c;
# CUDA graphs: stream capture on the tenant's own streams, the graphs it yields, their
# executable instances, and explicit construction: kernel, device-to-device copy, empty, memset,
# event, child graph and host nodes, edges by node id, removed nodes and clones.
#
# Graph and exec ids are chosen by the client, like stream ids, and are private to the tenant;
# tallyd maps them to its own CUgraph / CUgraphExec. A node is named by its graph and its
# position in that graph: node id i + 1 is the i-th node cuGraphGetNodes listed, followed by the
# nodes the client added since, in order; a destroyed node's id is never reused. Kernel nodes name the tenant's functions by the
# client's function handles (module.capnp), never by a driver address.
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tally::wire");

using Launch = import "launch.capnp";
using Memory = import "memory.capnp";

struct BeginCapture {
  # Reply.value: the capture's id (what cuStreamGetCaptureInfo reports).
  stream @0 :UInt64;
  mode @1 :UInt32;                # the application's CUstreamCaptureMode; tallyd always captures
                                  # relaxed (its one thread runs every call of the tenant) and the
                                  # client enforces the mode among the application's threads
}

struct EndCapture {
  stream @0 :UInt64;
  graph @1 :UInt64;               # client-chosen id of the captured graph
  invalidated @2 :Bool;           # the client refused a call that invalidates the capture natively
}

struct GraphRef {
  graph @0 :UInt64;
}

struct GraphExecRef {
  exec @0 :UInt64;
}

struct GraphInstantiate {
  graph @0 :UInt64;
  exec @1 :UInt64;                # client-chosen id of the executable graph
  flags @2 :UInt64;               # CUgraphInstantiate_flags
}

struct GraphLaunch {
  # Also cuGraphUpload's arguments.
  exec @0 :UInt64;
  stream @1 :UInt64;
  hostNodes @2 :List(HostNodeLaunch);  # launch: one entry per host node of the executable graph
}

struct HostNodeLaunch {
  # A host node runs in the client (schema/stream.capnp HostFunc, shared words): in this launch
  # the node writes `sequence` to `reachedWord` and waits until `doneWord` >= it. The client
  # chooses the words (one pair per executable graph and node) and a new sequence per launch.
  node @0 :UInt32;                # node id in the graph the executable graph was instantiated from
  reachedWord @1 :UInt64;         # client addresses in a registered shared region
  doneWord @2 :UInt64;
  sequence @3 :UInt32;
}

struct GraphNodeRef {
  graph @0 :UInt64;
  node @1 :UInt32;
}

struct KernelNodeParams {
  function @0 :UInt64;            # the client's function handle; 0: not one of the tenant's
  grid @1 :Launch.Dim3;
  block @2 :Launch.Dim3;
  sharedMem @3 :UInt32;
  params @4 :Data;                # laid out by the function's parameter offsets, as in LaunchKernel
}

struct KernelNodeSetParams {
  exec @0 :UInt64;                # 0: the node of the graph itself (cuGraphKernelNodeSetParams)
  node @1 :GraphNodeRef;          # a node of the graph `exec` was instantiated from
  params @2 :KernelNodeParams;
}

struct GraphCreate {
  graph @0 :UInt64;
  device @1 :UInt32;
}

struct AddKernelNode {
  # Reply.value: the new node's id.
  graph @0 :UInt64;
  dependencies @1 :List(UInt32);  # node ids of the same graph
  params @2 :KernelNodeParams;
}

struct AddMemcpyNode {
  # Device to device only: `height` rows of `width` bytes. Reply.value: the new node's id.
  graph @0 :UInt64;
  dependencies @1 :List(UInt32);
  dst @2 :UInt64;
  src @3 :UInt64;
  width @4 :UInt64;
  height @5 :UInt64;
  dstPitch @6 :UInt64;            # 0: packed
  srcPitch @7 :UInt64;
}

struct AddDependencies {
  graph @0 :UInt64;
  from @1 :List(UInt32);          # edge i goes from from[i] to to[i]
  to @2 :List(UInt32);
}

struct AddNode {
  # The node kinds that carry no function: Reply.value is the new node's id.
  graph @0 :UInt64;
  dependencies @1 :List(UInt32);  # node ids of the same graph
  union {
    empty @2 :Void;
    memset @3 :Memory.Memset;     # `stream` unused; dst must be the tenant's memory on the graph's GPU
    eventRecord @4 :UInt64;       # the tenant's event id
    eventWait @5 :UInt64;
    childGraph @6 :UInt64;        # the tenant's graph id: the node embeds a copy of it
    host @7 :Void;                # runs in the client at every launch (HostNodeLaunch); Unix-socket
                                  # clients that share memory only; not inside a child graph
  }
}

struct GraphClone {
  # The clone's node i + 1 is the original's node i + 1 (cuGraphNodeFindInClone), so the
  # client finds a node in the clone without asking.
  graph @0 :UInt64;
  clone @1 :UInt64;               # client-chosen id of the copy
}

struct GraphEdges {
  # Edge i goes from node from[i] to node to[i].
  from @0 :List(UInt32);
  to @1 :List(UInt32);
}

struct ExecNodeRef {
  exec @0 :UInt64;                # 0 where the call may name the graph's own node
  node @1 :GraphNodeRef;          # a node of the graph `exec` was instantiated from
}

struct MemsetNodeSetParams {
  # In the graph (exec 0: cuGraphMemsetNodeSetParams) or in an executable graph.
  target @0 :ExecNodeRef;
  params @1 :Memory.Memset;       # `stream` unused
}

struct NodeSetEnabled {
  target @0 :ExecNodeRef;
  enabled @1 :Bool;
}

struct GraphExecUpdate {
  # cuGraphExecUpdate: the executable graph takes the parameters of `graph`, which must have its
  # graph's shape. Neither may hold host nodes (their words are set per launch on the nodes the
  # exec was instantiated with).
  exec @0 :UInt64;
  graph @1 :UInt64;
}

struct ExecUpdateResult {
  result @0 :UInt32;              # CUgraphExecUpdateResult
  errorNode @1 :UInt32;           # node id in `graph` (0: none)
  errorFromNode @2 :UInt32;       # node id in the exec's own graph (0: none, or that graph is gone)
}

struct GraphReply {
  union {
    nodeTypes @0 :List(UInt8);    # graphGetNodes: CUgraphNodeType of node id i + 1 (kRemovedNode: destroyed)
    kernelNode @1 :KernelNodeParams;
    edges @2 :GraphEdges;         # graphGetEdges
    memsetNode @3 :Memory.Memset; # graphMemsetNodeGetParams (`stream` unused)
    execUpdate @4 :ExecUpdateResult;
  }
}

const kRemovedNode :UInt8 = 255;  # nodeTypes entry of a node cuGraphDestroyNode removed
