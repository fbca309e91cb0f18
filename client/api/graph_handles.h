// The graph, node and executable graph handles the application holds (graph.cc, graph_nodes.cc)
// and what both files need to name them on the wire: tallyd holds the CUgraph / CUgraphExec and
// knows them by ids this client chose (schema/graph.capnp).
#pragma once

#include "client/api/api_util.h"
#include "schema/envelope.capnp.h"

#include <capnp/list.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

namespace tally::client::graphs {

inline ClientRuntime& rt() { return ClientRuntime::get(); }

struct GraphHandle;

// What a host node runs, in this process, at every launch of an executable graph that holds it.
struct HostNodeCall {
  CUhostFn fn = nullptr;
  void* userData = nullptr;
};

struct GraphNodeHandle {
  HandleMagic magic = HandleMagic::kGraphNode;
  GraphHandle* graph = nullptr;
  uint32_t id = 0;  // position in tallyd's graph (schema/graph.capnp)
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  // A kernel node's parameters as cudaGraphKernelNodeGetParams last returned them: its pointers
  // stay valid until the next such call on the node, or the graph's end.
  std::vector<uint8_t> paramBytes;
  std::vector<void*> paramPointers;
  HostNodeCall host;  // host nodes: what they run (tallyd knows only that they are host nodes)
};

struct GraphHandle {
  HandleMagic magic = HandleMagic::kGraph;
  uint64_t id = 0;
  uint32_t device = 0;
  std::mutex mutex;
  bool nodesKnown = false;                     // every node of tallyd's graph has a handle here
  std::map<uint32_t, GraphNodeHandle*> nodes;  // owned, by id (tallyd's order)
  // A clone's nodes have their original's ids: those up to `clonedIds` of graph `clonedFrom`.
  uint64_t clonedFrom = 0;
  uint32_t clonedIds = 0;
};

struct GraphExecHandle {
  HandleMagic magic = HandleMagic::kGraphExec;
  uint64_t id = 0;
  uint32_t device = 0;
  uint64_t graph = 0;  // id of the graph it was instantiated from: its nodes are the ones to set
  GraphHandle* origin = nullptr;  // that graph's handle, valid only while registered with that id
  unsigned long long flags = 0;  // as instantiated (cudaGraphExecGetFlags)
  std::mutex mutex;              // guards hostNodes
  std::map<uint32_t, HostNodeCall> hostNodes;  // by node id, as instantiated or set since
};

// The key of an executable graph's host node among the client's host-callback word pairs
// (runtime/host_callback_words.h, which keys streams by their ids: those never set the top bit).
inline uint64_t hostNodeKey(uint64_t exec, uint32_t node) { return (uint64_t{1} << 63) | (exec << 24) | node; }

enum class Api { kRuntime, kDriver };

// The native answer to a handle that is not one of ours (or no longer is).
inline CUresult badHandle(const void* handle, Api api) {
  return handle == nullptr || api == Api::kRuntime ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
}

template <typename T>
CUresult checked(const void* handle, HandleMagic magic, Api api, T*& out) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  out = checkedHandle<T>(handle, magic);
  return out != nullptr ? CUDA_SUCCESS : badHandle(handle, api);
}

inline std::optional<wire::GraphReply::Reader> graphReply(wire::Reply::Reader reply) {
  if (!reply.isGraph()) return std::nullopt;
  return reply.getGraph();
}

// A new graph handle of `device` under a fresh id, not yet registered.
GraphHandle* newGraphHandle(uint32_t device);
// Registers `g` and hands it out in *out.
void publishGraph(GraphHandle* g, CUgraph* out);
// Node handle `id` of `g`, created on first sight; g.mutex held.
GraphNodeHandle* nodeOf(GraphHandle& g, uint32_t id, CUgraphNodeType type);
// Forgets node `id` of `g` (its handle is refused from now on); g.mutex held.
void dropNode(GraphHandle& g, uint32_t id);
// Handles for every node of tallyd's graph; g.mutex held.
CUresult learnNodes(GraphHandle& g);
// Node ids of `nodes` (all of graph `g`), or CUDA_ERROR_INVALID_VALUE.
CUresult nodeIds(const GraphHandle& g, const CUgraphNode* nodes, size_t count, std::vector<uint32_t>& out);
void setIds(capnp::List<uint32_t>::Builder list, const std::vector<uint32_t>& ids);

// Asks tallyd about `node`, which must be of `type`: `init` starts the call and returns the node
// reference to fill; the answer in `reply`.
using NodeQuery = std::function<wire::GraphNodeRef::Builder(wire::Call::Builder)>;
CUresult queryNode(CUgraphNode node, CUgraphNodeType type, Api api, const NodeQuery& init, ReplyMessage& reply);

// Adds the edges from[i] → to[i] to `graph`, or removes them (`remove`).
CUresult changeDependencies(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to, const void* edgeData,
                            size_t count, bool remove, Api api);

// Adds a node built by `fill` (given the graph's and the dependencies' ids) to `graph`; its handle in *out.
using NodeFill = std::function<void(wire::Call::Builder, uint64_t graph, const std::vector<uint32_t>& dependencies)>;
CUresult addNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* dependencies, size_t count, CUgraphNodeType type,
                 const NodeFill& fill, Api api);

}  // namespace tally::client::graphs
