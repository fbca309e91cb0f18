// Graphs built by hand, beyond kernel and copy nodes (graph.cc): empty, memset, event record and
// wait, and child graph nodes; memset node parameters (in the graph or an executable graph) and
// nodes enabled or disabled in an executable graph; the graph's structure (edges, roots, a node's
// dependencies and dependents), removing edges and nodes, clones, an executable graph's flags,
// and DOT output.
//
// The structure is tallyd's: every query asks it for the edges (node ids, schema/graph.capnp)
// and answers from them, so what the application sees is what the driver holds. Programmatic
// edges are not forwarded, so every edge's data is the default one (zeros).
#include "client/api/graph_handles.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <utility>
#include <vector>

using namespace tally::client;
using namespace tally::client::graphs;

namespace {

// --- nodes without functions ------------------------------------------------------------------

CUresult addEmptyNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* dependencies, size_t count, Api api) {
  return addNode(out, graph, dependencies, count, CU_GRAPH_NODE_TYPE_EMPTY,
                 [](wire::Call::Builder c, uint64_t graphId, const std::vector<uint32_t>& ids) {
                   auto a = c.initGraphAddNode();
                   a.setGraph(graphId);
                   setIds(a.initDependencies(static_cast<unsigned>(ids.size())), ids);
                   a.setEmpty();
                 }, api);
}

// A memset node's parameters in the form both APIs give them.
struct MemsetRequest {
  uint64_t dst = 0;
  size_t pitch = 0;
  unsigned value = 0;
  unsigned elementSize = 0;
  size_t width = 0;
  size_t height = 0;
};

// The shape checks the driver makes; whether the destination is this tenant's memory on the
// graph's device is tallyd's to check.
CUresult checkMemset(const MemsetRequest& m) {
  if (m.elementSize != 1 && m.elementSize != 2 && m.elementSize != 4) return CUDA_ERROR_INVALID_VALUE;
  if (m.width == 0 || m.height == 0 || (m.height > 1 && m.pitch < m.width * m.elementSize)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

void fillMemset(wire::Memset::Builder s, const MemsetRequest& m) {
  s.setDst(m.dst);
  s.setValue(m.value);
  s.setWidth(m.width);
  s.setHeight(m.height);
  s.setPitch(m.height > 1 ? m.pitch : 0);
  s.setElementSize(static_cast<uint8_t>(m.elementSize));
}

CUresult addMemsetNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                       const MemsetRequest& m, Api api) {
  if (CUresult r = checkMemset(m); r != CUDA_SUCCESS) return r;
  return addNode(out, graph, dependencies, count, CU_GRAPH_NODE_TYPE_MEMSET,
                 [&](wire::Call::Builder c, uint64_t graphId, const std::vector<uint32_t>& ids) {
                   auto a = c.initGraphAddNode();
                   a.setGraph(graphId);
                   setIds(a.initDependencies(static_cast<unsigned>(ids.size())), ids);
                   fillMemset(a.initMemset(), m);
                 }, api);
}

// Event record (`record`) or wait node of one of this process's events.
CUresult addEventNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* dependencies, size_t count, CUevent event,
                      bool record, Api api) {
  auto* e = checkedHandle<EventHandle>(event, HandleMagic::kEvent);
  if (e == nullptr) return event == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
  return addNode(out, graph, dependencies, count, record ? CU_GRAPH_NODE_TYPE_EVENT_RECORD : CU_GRAPH_NODE_TYPE_WAIT_EVENT,
                 [&](wire::Call::Builder c, uint64_t graphId, const std::vector<uint32_t>& ids) {
                   auto a = c.initGraphAddNode();
                   a.setGraph(graphId);
                   setIds(a.initDependencies(static_cast<unsigned>(ids.size())), ids);
                   if (record) {
                     a.setEventRecord(e->id);
                   } else {
                     a.setEventWait(e->id);
                   }
                 }, api);
}

// The node embeds a copy of `child` (tallyd's driver clones it), as natively.
CUresult addChildGraphNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                           CUgraph child, Api api) {
  GraphHandle* c = nullptr;
  if (CUresult r = checked(child, HandleMagic::kGraph, api, c); r != CUDA_SUCCESS) return r;
  if (child == graph) return CUDA_ERROR_INVALID_VALUE;
  return addNode(out, graph, dependencies, count, CU_GRAPH_NODE_TYPE_GRAPH,
                 [&](wire::Call::Builder call, uint64_t graphId, const std::vector<uint32_t>& ids) {
                   auto a = call.initGraphAddNode();
                   a.setGraph(graphId);
                   setIds(a.initDependencies(static_cast<unsigned>(ids.size())), ids);
                   a.setChildGraph(c->id);
                 }, api);
}

// --- host nodes -------------------------------------------------------------------------------
// tallyd's graph holds a node that, at each launch, hands the client's callback thread the turn
// through two words of memory shared over the Unix socket and waits for it (schema/graph.capnp
// HostNodeLaunch); what the node runs stays here, as for cudaLaunchHostFunc.

CUresult addHostNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                     HostNodeCall call, Api api) {
  if (call.fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  if (rt().hostCallbackWords() == nullptr) {
    spdlog::warn("tally: graph host nodes need memory shared with tallyd (a Unix socket); returning NotSupported");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  CUresult r = addNode(out, graph, dependencies, count, CU_GRAPH_NODE_TYPE_HOST,
                       [](wire::Call::Builder c, uint64_t graphId, const std::vector<uint32_t>& ids) {
                         auto a = c.initGraphAddNode();
                         a.setGraph(graphId);
                         setIds(a.initDependencies(static_cast<unsigned>(ids.size())), ids);
                         a.setHost();
                       }, api);
  if (r != CUDA_SUCCESS) return r;
  auto* node = reinterpret_cast<GraphNodeHandle*>(*out);
  std::lock_guard lock(node->graph->mutex);
  node->host = call;
  return CUDA_SUCCESS;
}

CUresult hostNode(CUgraphNode node, Api api, GraphNodeHandle*& out) {
  if (CUresult r = checked(node, HandleMagic::kGraphNode, api, out); r != CUDA_SUCCESS) return r;
  return out->type == CU_GRAPH_NODE_TYPE_HOST ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult getHostNode(CUgraphNode node, HostNodeCall* out, Api api) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GraphNodeHandle* n = nullptr;
  if (CUresult r = hostNode(node, api, n); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(n->graph->mutex);
  *out = n->host;
  return CUDA_SUCCESS;
}

CUresult setHostNode(CUgraphNode node, const HostNodeCall* call, Api api) {
  if (call == nullptr || call->fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GraphNodeHandle* n = nullptr;
  if (CUresult r = hostNode(node, api, n); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(n->graph->mutex);
  n->host = *call;
  return CUDA_SUCCESS;
}

// The node must be a host node of the graph `exec` was instantiated from; later launches run the
// new function, the graph keeps its own.
CUresult setExecHostNode(CUgraphExec exec, CUgraphNode node, const HostNodeCall* call, Api api) {
  if (call == nullptr || call->fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GraphExecHandle* e = nullptr;
  if (CUresult r = checked(exec, HandleMagic::kGraphExec, api, e); r != CUDA_SUCCESS) return r;
  GraphNodeHandle* n = nullptr;
  if (CUresult r = hostNode(node, api, n); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(e->mutex);
  auto it = e->hostNodes.find(n->id);
  if (n->graph->id != e->graph || it == e->hostNodes.end()) return CUDA_ERROR_INVALID_VALUE;
  it->second = *call;
  return CUDA_SUCCESS;
}

HostNodeCall hostCallOf(const cudaHostNodeParams* p) { return p == nullptr ? HostNodeCall{} : HostNodeCall{p->fn, p->userData}; }
HostNodeCall hostCallOf(const CUDA_HOST_NODE_PARAMS* p) { return p == nullptr ? HostNodeCall{} : HostNodeCall{p->fn, p->userData}; }

// --- structure --------------------------------------------------------------------------------

using Edges = std::vector<std::pair<GraphNodeHandle*, GraphNodeHandle*>>;

// The graph's edges as tallyd reports them, by node handle; g.mutex held.
CUresult edgesOf(GraphHandle& g, Edges& out) {
  if (CUresult r = learnNodes(g); r != CUDA_SUCCESS) return r;
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) { c.initGraphGetEdges().setGraph(g.id); }, &reply);
  if (r != CUDA_SUCCESS) return r;
  std::optional<wire::GraphReply::Reader> answer = graphReply(reply.reply());
  if (!answer || !answer->isEdges()) return CUDA_ERROR_UNKNOWN;
  auto from = answer->getEdges().getFrom();
  auto to = answer->getEdges().getTo();
  if (from.size() != to.size()) return CUDA_ERROR_UNKNOWN;
  for (unsigned i = 0; i < from.size(); ++i) {
    auto a = g.nodes.find(from[i]), b = g.nodes.find(to[i]);
    if (a == g.nodes.end() || b == g.nodes.end()) return CUDA_ERROR_UNKNOWN;
    out.emplace_back(a->second, b->second);
  }
  return CUDA_SUCCESS;
}

// The native contract of the list queries: only the count when `nodes` is null; else up to
// *count entries, the rest of the array nulled, *count lowered to the number filled. Every
// edge's data is the default (zeros).
template <typename Fill>
void answerList(size_t found, CUgraphNode* nodes, CUgraphEdgeData* edgeData, size_t* count, Fill fill) {
  if (nodes == nullptr) {
    *count = found;
    return;
  }
  size_t filled = std::min(found, *count);
  for (size_t i = 0; i < *count; ++i) {
    fill(i, i < filled);
    if (edgeData != nullptr) edgeData[i] = CUgraphEdgeData{};
  }
  *count = filled;
}

void answerNodes(const std::vector<GraphNodeHandle*>& found, CUgraphNode* nodes, CUgraphEdgeData* edgeData,
                 size_t* count) {
  answerList(found.size(), nodes, edgeData, count, [&](size_t i, bool set) {
    nodes[i] = set ? reinterpret_cast<CUgraphNode>(found[i]) : nullptr;
  });
}

CUresult getEdges(CUgraph graph, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edgeData, size_t* count,
                  Api api) {
  if (count == nullptr || (from == nullptr) != (to == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  GraphHandle* g = nullptr;
  if (CUresult r = checked(graph, HandleMagic::kGraph, api, g); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(g->mutex);
  Edges edges;
  if (CUresult r = edgesOf(*g, edges); r != CUDA_SUCCESS) return r;
  answerList(edges.size(), from, edgeData, count, [&](size_t i, bool set) {
    from[i] = set ? reinterpret_cast<CUgraphNode>(edges[i].first) : nullptr;
    to[i] = set ? reinterpret_cast<CUgraphNode>(edges[i].second) : nullptr;
  });
  return CUDA_SUCCESS;
}

CUresult getRootNodes(CUgraph graph, CUgraphNode* nodes, size_t* count, Api api) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GraphHandle* g = nullptr;
  if (CUresult r = checked(graph, HandleMagic::kGraph, api, g); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(g->mutex);
  Edges edges;
  if (CUresult r = edgesOf(*g, edges); r != CUDA_SUCCESS) return r;
  std::set<GraphNodeHandle*> dependents;
  for (auto& [from, to] : edges) dependents.insert(to);
  std::vector<GraphNodeHandle*> roots;
  for (auto& [id, node] : g->nodes) {
    if (dependents.count(node) == 0) roots.push_back(node);
  }
  answerNodes(roots, nodes, nullptr, count);
  return CUDA_SUCCESS;
}

// A node's dependencies (`incoming`) or dependent nodes, in the order of tallyd's edges.
CUresult nodeNeighbours(CUgraphNode node, CUgraphNode* out, CUgraphEdgeData* edgeData, size_t* count, bool incoming,
                        Api api) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GraphNodeHandle* n = nullptr;
  if (CUresult r = checked(node, HandleMagic::kGraphNode, api, n); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(n->graph->mutex);
  Edges edges;
  if (CUresult r = edgesOf(*n->graph, edges); r != CUDA_SUCCESS) return r;
  std::vector<GraphNodeHandle*> found;
  for (auto& [from, to] : edges) {
    if ((incoming ? to : from) == n) found.push_back(incoming ? from : to);
  }
  answerNodes(found, out, edgeData, count);
  return CUDA_SUCCESS;
}

// The node and its edges go; its handle is refused from then on.
CUresult destroyNode(CUgraphNode node, Api api) {
  GraphNodeHandle* n = nullptr;
  if (CUresult r = checked(node, HandleMagic::kGraphNode, api, n); r != CUDA_SUCCESS) return r;
  GraphHandle& g = *n->graph;
  std::lock_guard lock(g.mutex);
  uint32_t id = n->id;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto ref = c.initGraphDestroyNode();
    ref.setGraph(g.id);
    ref.setNode(id);
  });
  if (r == CUDA_SUCCESS) dropNode(g, id);
  return r;
}

// --- memset node parameters and enabled nodes ----------------------------------------------------

// `node` and, unless null, the executable graph instantiated from its graph (its id in execId, else 0).
CUresult resolveExecNode(CUgraphExec exec, CUgraphNode node, Api api, GraphNodeHandle*& n, uint64_t& execId) {
  if (CUresult r = checked(node, HandleMagic::kGraphNode, api, n); r != CUDA_SUCCESS) return r;
  execId = 0;
  if (exec == nullptr) return CUDA_SUCCESS;
  GraphExecHandle* e = nullptr;
  if (CUresult r = checked(exec, HandleMagic::kGraphExec, api, e); r != CUDA_SUCCESS) return r;
  if (e->graph != n->graph->id) return CUDA_ERROR_INVALID_VALUE;  // not a node of its graph
  execId = e->id;
  return CUDA_SUCCESS;
}

void setExecNodeRef(wire::ExecNodeRef::Builder ref, uint64_t execId, const GraphNodeHandle& n) {
  ref.setExec(execId);
  auto node = ref.initNode();
  node.setGraph(n.graph->id);
  node.setNode(n.id);
}

CUresult memsetNodeParams(CUgraphNode node, MemsetRequest& out, Api api) {
  ReplyMessage reply;
  CUresult r = queryNode(node, CU_GRAPH_NODE_TYPE_MEMSET, api,
                         [](wire::Call::Builder c) { return c.initGraphMemsetNodeGetParams(); }, reply);
  if (r != CUDA_SUCCESS) return r;
  std::optional<wire::GraphReply::Reader> answer = graphReply(reply.reply());
  if (!answer || !answer->isMemsetNode()) return CUDA_ERROR_UNKNOWN;
  auto m = answer->getMemsetNode();
  out = MemsetRequest{m.getDst(), m.getPitch(), m.getValue(), m.getElementSize(), m.getWidth(), m.getHeight()};
  return CUDA_SUCCESS;
}

// In the node's graph (exec null) or in an executable graph instantiated from that graph.
CUresult setMemsetNode(CUgraphExec exec, CUgraphNode node, const MemsetRequest& m, Api api) {
  GraphNodeHandle* n = nullptr;
  uint64_t execId = 0;
  if (CUresult r = resolveExecNode(exec, node, api, n, execId); r != CUDA_SUCCESS) return r;
  if (n->type != CU_GRAPH_NODE_TYPE_MEMSET) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkMemset(m); r != CUDA_SUCCESS) return r;
  return rt().call([&](wire::Call::Builder c) {
    auto set = c.initGraphMemsetNodeSetParams();
    setExecNodeRef(set.initTarget(), execId, *n);
    fillMemset(set.initParams(), m);
  });
}

CUresult nodeEnabled(CUgraphExec exec, CUgraphNode node, unsigned* enabled, Api api) {
  if (exec == nullptr || enabled == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GraphNodeHandle* n = nullptr;
  uint64_t execId = 0;
  if (CUresult r = resolveExecNode(exec, node, api, n, execId); r != CUDA_SUCCESS) return r;
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) { setExecNodeRef(c.initGraphNodeGetEnabled(), execId, *n); }, &reply);
  if (r != CUDA_SUCCESS) return r;
  if (!reply.reply().isValue()) return CUDA_ERROR_UNKNOWN;
  *enabled = static_cast<unsigned>(reply.reply().getValue());
  return CUDA_SUCCESS;
}

CUresult setNodeEnabled(CUgraphExec exec, CUgraphNode node, unsigned enabled, Api api) {
  if (exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GraphNodeHandle* n = nullptr;
  uint64_t execId = 0;
  if (CUresult r = resolveExecNode(exec, node, api, n, execId); r != CUDA_SUCCESS) return r;
  return rt().call([&](wire::Call::Builder c) {
    auto set = c.initGraphNodeSetEnabled();
    setExecNodeRef(set.initTarget(), execId, *n);
    set.setEnabled(enabled != 0);
  });
}

MemsetRequest fromRuntime(const cudaMemsetParams& p) {
  return MemsetRequest{reinterpret_cast<uint64_t>(p.dst), p.pitch, p.value, p.elementSize, p.width, p.height};
}

MemsetRequest fromDriver(const CUDA_MEMSET_NODE_PARAMS& p) {
  return MemsetRequest{p.dst, p.pitch, p.value, p.elementSize, p.width, p.height};
}

// --- clones -----------------------------------------------------------------------------------

CUresult cloneGraph(CUgraph* out, CUgraph original, Api api) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GraphHandle* g = nullptr;
  if (CUresult r = checked(original, HandleMagic::kGraph, api, g); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(g->mutex);
  if (CUresult r = learnNodes(*g); r != CUDA_SUCCESS) return r;
  GraphHandle* clone = newGraphHandle(g->device);
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto a = c.initGraphClone();
    a.setGraph(g->id);
    a.setClone(clone->id);
  });
  if (r != CUDA_SUCCESS) {
    delete clone;
    return r;
  }
  // tallyd gives each cloned node its original's id.
  clone->clonedFrom = g->id;
  clone->nodesKnown = true;
  for (auto& [id, node] : g->nodes) {
    nodeOf(*clone, id, node->type)->host = node->host;
    clone->clonedIds = id;
  }
  publishGraph(clone, out);
  return CUDA_SUCCESS;
}

// Nodes added to either graph after the clone have ids past `clonedIds` and match nothing. A
// graph that is not a clone of the node's graph (the original itself, say) finds nothing: the
// native error, with the output cleared (natively the node handle it held is unusable after).
CUresult findInClone(CUgraphNode* out, CUgraphNode original, CUgraph cloned, Api api) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GraphNodeHandle* n = nullptr;
  GraphHandle* clone = nullptr;
  if (CUresult r = checked(original, HandleMagic::kGraphNode, api, n); r != CUDA_SUCCESS) return r;
  if (CUresult r = checked(cloned, HandleMagic::kGraph, api, clone); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(clone->mutex);
  auto it = clone->nodes.find(n->id);
  if (clone->clonedFrom != n->graph->id || n->id > clone->clonedIds || it == clone->nodes.end()) {
    *out = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  *out = reinterpret_cast<CUgraphNode>(it->second);
  return CUDA_SUCCESS;
}

// --- executable graphs and DOT --------------------------------------------------------------------

CUresult execFlags(CUgraphExec exec, unsigned long long* flags, Api api) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GraphExecHandle* e = nullptr;
  if (CUresult r = checked(exec, HandleMagic::kGraphExec, api, e); r != CUDA_SUCCESS) return r;
  *flags = e->flags;
  return CUDA_SUCCESS;
}

const char* typeName(CUgraphNodeType type) {
  switch (type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return "KERNEL";
    case CU_GRAPH_NODE_TYPE_MEMCPY: return "MEMCPY";
    case CU_GRAPH_NODE_TYPE_MEMSET: return "MEMSET";
    case CU_GRAPH_NODE_TYPE_HOST: return "HOST";
    case CU_GRAPH_NODE_TYPE_GRAPH: return "CHILD_GRAPH";
    case CU_GRAPH_NODE_TYPE_EMPTY: return "EMPTY";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return "WAIT_EVENT";
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return "EVENT_RECORD";
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: return "MEM_ALLOC";
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return "MEM_FREE";
    default: return "OTHER";
  }
}

// The nodes and edges as tallyd holds them, in DOT; `flags` (the native detail levels) are
// accepted and give this one form.
std::string dotOf(const GraphHandle& g, const Edges& edges) {
  std::string dot = "digraph tally_graph_" + std::to_string(g.id) + " {\n";
  for (auto& [id, node] : g.nodes) {
    dot += "  node" + std::to_string(id) + " [label=\"" + std::to_string(id) + ": " + typeName(node->type) + "\"];\n";
  }
  for (auto& [from, to] : edges) dot += "  node" + std::to_string(from->id) + " -> node" + std::to_string(to->id) + ";\n";
  return dot + "}\n";
}

CUresult debugDotPrint(CUgraph graph, const char* path, Api api) {
  if (path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GraphHandle* g = nullptr;
  if (CUresult r = checked(graph, HandleMagic::kGraph, api, g); r != CUDA_SUCCESS) return r;
  std::string dot;
  {
    std::lock_guard lock(g->mutex);
    Edges edges;
    if (CUresult r = edgesOf(*g, edges); r != CUDA_SUCCESS) return r;
    dot = dotOf(*g, edges);
  }
  FILE* file = std::fopen(path, "w");
  if (file == nullptr) return CUDA_ERROR_OPERATING_SYSTEM;
  bool written = std::fwrite(dot.data(), 1, dot.size(), file) == dot.size();
  return std::fclose(file) == 0 && written ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
}

CUgraph asGraph(cudaGraph_t g) { return reinterpret_cast<CUgraph>(g); }
CUgraphNode asNode(cudaGraphNode_t n) { return reinterpret_cast<CUgraphNode>(n); }
CUgraphNode* asNodes(cudaGraphNode_t* n) { return reinterpret_cast<CUgraphNode*>(n); }
const CUgraphNode* asNodes(const cudaGraphNode_t* n) { return reinterpret_cast<const CUgraphNode*>(n); }
CUgraphEdgeData* asEdgeData(cudaGraphEdgeData* e) { return reinterpret_cast<CUgraphEdgeData*>(e); }

}  // namespace

// --- runtime -----------------------------------------------------------------------------------

TALLY_API cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* dependencies,
                                            size_t count) {
  return guardRuntime(__func__, [&] {
    return addEmptyNode(asNodes(node), asGraph(graph), asNodes(dependencies), count, Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                             const cudaGraphNode_t* dependencies, size_t count,
                                             const cudaMemsetParams* p) {
  return guardRuntime(__func__, [&] {
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return addMemsetNode(asNodes(node), asGraph(graph), asNodes(dependencies), count, fromRuntime(*p), Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphAddEventRecordNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                                  const cudaGraphNode_t* dependencies, size_t count, cudaEvent_t event) {
  return guardRuntime(__func__, [&] {
    return addEventNode(asNodes(node), asGraph(graph), asNodes(dependencies), count, event, true, Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphAddEventWaitNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                                const cudaGraphNode_t* dependencies, size_t count, cudaEvent_t event) {
  return guardRuntime(__func__, [&] {
    return addEventNode(asNodes(node), asGraph(graph), asNodes(dependencies), count, event, false, Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                                 const cudaGraphNode_t* dependencies, size_t count, cudaGraph_t child) {
  return guardRuntime(__func__, [&] {
    return addChildGraphNode(asNodes(node), asGraph(graph), asNodes(dependencies), count, asGraph(child), Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphAddHostNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* dependencies,
                                          size_t count, const cudaHostNodeParams* params) {
  return guardRuntime(__func__, [&] {
    if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return addHostNode(asNodes(node), asGraph(graph), asNodes(dependencies), count, hostCallOf(params), Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t node, cudaHostNodeParams* params) {
  return guardRuntime(__func__, [&] {
    if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
    HostNodeCall call;
    CUresult r = getHostNode(reinterpret_cast<CUgraphNode>(node), &call, Api::kRuntime);
    if (r == CUDA_SUCCESS) *params = cudaHostNodeParams{call.fn, call.userData};
    return r;
  });
}
TALLY_API cudaError_t cudaGraphHostNodeSetParams(cudaGraphNode_t node, const cudaHostNodeParams* params) {
  return guardRuntime(__func__, [&] {
    if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
    HostNodeCall call = hostCallOf(params);
    return setHostNode(reinterpret_cast<CUgraphNode>(node), &call, Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                    const cudaHostNodeParams* params) {
  return guardRuntime(__func__, [&] {
    if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
    HostNodeCall call = hostCallOf(params);
    return setExecHostNode(reinterpret_cast<CUgraphExec>(exec), reinterpret_cast<CUgraphNode>(node), &call,
                           Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t* from, cudaGraphNode_t* to,
                                        cudaGraphEdgeData* edgeData, size_t* count) {
  return guardRuntime(__func__, [&] {
    return getEdges(asGraph(graph), asNodes(from), asNodes(to), asEdgeData(edgeData), count, Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphGetRootNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  return guardRuntime(__func__, [&] { return getRootNodes(asGraph(graph), asNodes(nodes), count, Api::kRuntime); });
}
TALLY_API cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t* dependencies,
                                                   cudaGraphEdgeData* edgeData, size_t* count) {
  return guardRuntime(__func__, [&] {
    return nodeNeighbours(asNode(node), asNodes(dependencies), asEdgeData(edgeData), count, true, Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node, cudaGraphNode_t* dependents,
                                                     cudaGraphEdgeData* edgeData, size_t* count) {
  return guardRuntime(__func__, [&] {
    return nodeNeighbours(asNode(node), asNodes(dependents), asEdgeData(edgeData), count, false, Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphRemoveDependencies(cudaGraph_t graph, const cudaGraphNode_t* from,
                                                  const cudaGraphNode_t* to, const cudaGraphEdgeData* edgeData,
                                                  size_t count) {
  return guardRuntime(__func__, [&] {
    return changeDependencies(asGraph(graph), asNodes(from), asNodes(to), edgeData, count, true, Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node) {
  return guardRuntime(__func__, [&] { return destroyNode(asNode(node), Api::kRuntime); });
}
TALLY_API cudaError_t cudaGraphClone(cudaGraph_t* clone, cudaGraph_t original) {
  return guardRuntime(__func__, [&] {
    return cloneGraph(reinterpret_cast<CUgraph*>(clone), asGraph(original), Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphNodeFindInClone(cudaGraphNode_t* node, cudaGraphNode_t original, cudaGraph_t clone) {
  return guardRuntime(__func__, [&] {
    return findInClone(asNodes(node), asNode(original), asGraph(clone), Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphExecGetFlags(cudaGraphExec_t exec, unsigned long long* flags) {
  return guardRuntime(__func__, [&] { return execFlags(reinterpret_cast<CUgraphExec>(exec), flags, Api::kRuntime); });
}
TALLY_API cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char* path, unsigned int) {
  return guardRuntime(__func__, [&] { return debugDotPrint(asGraph(graph), path, Api::kRuntime); });
}

TALLY_API cudaError_t cudaGraphMemsetNodeGetParams(cudaGraphNode_t node, cudaMemsetParams* p) {
  return guardRuntime(__func__, [&] {
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    MemsetRequest m;
    if (CUresult r = memsetNodeParams(asNode(node), m, Api::kRuntime); r != CUDA_SUCCESS) return r;
    *p = cudaMemsetParams{reinterpret_cast<void*>(m.dst), m.pitch, m.value, m.elementSize, m.width, m.height};
    return CUDA_SUCCESS;
  });
}
TALLY_API cudaError_t cudaGraphMemsetNodeSetParams(cudaGraphNode_t node, const cudaMemsetParams* p) {
  return guardRuntime(__func__, [&] {
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return setMemsetNode(nullptr, asNode(node), fromRuntime(*p), Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                       const cudaMemsetParams* p) {
  return guardRuntime(__func__, [&] {
    if (exec == nullptr || p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return setMemsetNode(reinterpret_cast<CUgraphExec>(exec), asNode(node), fromRuntime(*p), Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphNodeGetEnabled(cudaGraphExec_t exec, cudaGraphNode_t node, unsigned int* enabled) {
  return guardRuntime(__func__, [&] {
    return nodeEnabled(reinterpret_cast<CUgraphExec>(exec), asNode(node), enabled, Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphNodeSetEnabled(cudaGraphExec_t exec, cudaGraphNode_t node, unsigned int enabled) {
  return guardRuntime(__func__, [&] {
    return setNodeEnabled(reinterpret_cast<CUgraphExec>(exec), asNode(node), enabled, Api::kRuntime);
  });
}

// --- driver ------------------------------------------------------------------------------------

TALLY_API CUresult cuGraphAddEmptyNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count) {
  return guardDriver(__func__, [&] { return addEmptyNode(node, graph, dependencies, count, Api::kDriver); });
}
TALLY_API CUresult cuGraphAddMemsetNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                                        const CUDA_MEMSET_NODE_PARAMS* p, CUcontext) {
  return guardDriver(__func__, [&] {
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return addMemsetNode(node, graph, dependencies, count, fromDriver(*p), Api::kDriver);
  });
}
TALLY_API CUresult cuGraphAddEventRecordNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies,
                                             size_t count, CUevent event) {
  return guardDriver(__func__, [&] { return addEventNode(node, graph, dependencies, count, event, true, Api::kDriver); });
}
TALLY_API CUresult cuGraphAddEventWaitNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies,
                                           size_t count, CUevent event) {
  return guardDriver(__func__, [&] { return addEventNode(node, graph, dependencies, count, event, false, Api::kDriver); });
}
TALLY_API CUresult cuGraphAddChildGraphNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies,
                                            size_t count, CUgraph child) {
  return guardDriver(__func__, [&] { return addChildGraphNode(node, graph, dependencies, count, child, Api::kDriver); });
}
TALLY_API CUresult cuGraphAddHostNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                                      const CUDA_HOST_NODE_PARAMS* params) {
  return guardDriver(__func__, [&] {
    if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return addHostNode(node, graph, dependencies, count, hostCallOf(params), Api::kDriver);
  });
}
TALLY_API CUresult cuGraphHostNodeGetParams(CUgraphNode node, CUDA_HOST_NODE_PARAMS* params) {
  return guardDriver(__func__, [&] {
    if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
    HostNodeCall call;
    CUresult r = getHostNode(node, &call, Api::kDriver);
    if (r == CUDA_SUCCESS) {
      params->fn = call.fn;
      params->userData = call.userData;
    }
    return r;
  });
}
TALLY_API CUresult cuGraphHostNodeSetParams(CUgraphNode node, const CUDA_HOST_NODE_PARAMS* params) {
  return guardDriver(__func__, [&] {
    if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
    HostNodeCall call = hostCallOf(params);
    return setHostNode(node, &call, Api::kDriver);
  });
}
TALLY_API CUresult cuGraphExecHostNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_HOST_NODE_PARAMS* params) {
  return guardDriver(__func__, [&] {
    if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
    HostNodeCall call = hostCallOf(params);
    return setExecHostNode(exec, node, &call, Api::kDriver);
  });
}
TALLY_API CUresult cuGraphGetEdges(CUgraph graph, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edgeData,
                                   size_t* count) {  // _v2
  return guardDriver(__func__, [&] { return getEdges(graph, from, to, edgeData, count, Api::kDriver); });
}
TALLY_API CUresult cuGraphGetRootNodes(CUgraph graph, CUgraphNode* nodes, size_t* count) {
  return guardDriver(__func__, [&] { return getRootNodes(graph, nodes, count, Api::kDriver); });
}
TALLY_API CUresult cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode* dependencies, CUgraphEdgeData* edgeData,
                                              size_t* count) {  // _v2
  return guardDriver(__func__, [&] { return nodeNeighbours(node, dependencies, edgeData, count, true, Api::kDriver); });
}
TALLY_API CUresult cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode* dependents, CUgraphEdgeData* edgeData,
                                                size_t* count) {  // _v2
  return guardDriver(__func__, [&] { return nodeNeighbours(node, dependents, edgeData, count, false, Api::kDriver); });
}
TALLY_API CUresult cuGraphRemoveDependencies(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to,
                                             const CUgraphEdgeData* edgeData, size_t count) {  // _v2
  return guardDriver(__func__, [&] { return changeDependencies(graph, from, to, edgeData, count, true, Api::kDriver); });
}
TALLY_API CUresult cuGraphDestroyNode(CUgraphNode node) {
  return guardDriver(__func__, [&] { return destroyNode(node, Api::kDriver); });
}
TALLY_API CUresult cuGraphClone(CUgraph* clone, CUgraph original) {
  return guardDriver(__func__, [&] { return cloneGraph(clone, original, Api::kDriver); });
}
TALLY_API CUresult cuGraphNodeFindInClone(CUgraphNode* node, CUgraphNode original, CUgraph clone) {
  return guardDriver(__func__, [&] { return findInClone(node, original, clone, Api::kDriver); });
}
TALLY_API CUresult cuGraphExecGetFlags(CUgraphExec exec, cuuint64_t* flags) {
  return guardDriver(__func__, [&] {
    unsigned long long value = 0;
    CUresult r = execFlags(exec, flags != nullptr ? &value : nullptr, Api::kDriver);
    if (r == CUDA_SUCCESS) *flags = value;
    return r;
  });
}
TALLY_API CUresult cuGraphDebugDotPrint(CUgraph graph, const char* path, unsigned int) {
  return guardDriver(__func__, [&] { return debugDotPrint(graph, path, Api::kDriver); });
}

TALLY_API CUresult cuGraphMemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS* p) {
  return guardDriver(__func__, [&] {
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    MemsetRequest m;
    if (CUresult r = memsetNodeParams(node, m, Api::kDriver); r != CUDA_SUCCESS) return r;
    *p = CUDA_MEMSET_NODE_PARAMS{m.dst, m.pitch, m.value, m.elementSize, m.width, m.height};
    return CUDA_SUCCESS;
  });
}
TALLY_API CUresult cuGraphMemsetNodeSetParams(CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* p) {
  return guardDriver(__func__, [&] {
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return setMemsetNode(nullptr, node, fromDriver(*p), Api::kDriver);
  });
}
TALLY_API CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* p,
                                                  CUcontext) {
  return guardDriver(__func__, [&] {
    if (exec == nullptr || p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return setMemsetNode(exec, node, fromDriver(*p), Api::kDriver);
  });
}
TALLY_API CUresult cuGraphNodeGetEnabled(CUgraphExec exec, CUgraphNode node, unsigned int* enabled) {
  return guardDriver(__func__, [&] { return nodeEnabled(exec, node, enabled, Api::kDriver); });
}
TALLY_API CUresult cuGraphNodeSetEnabled(CUgraphExec exec, CUgraphNode node, unsigned int enabled) {
  return guardDriver(__func__, [&] { return setNodeEnabled(exec, node, enabled, Api::kDriver); });
}

// The exports older headers bind to (no #define renames them there); cuda.h declares them only
// for the driver's own build.
#undef cuGraphGetEdges
#undef cuGraphNodeGetDependencies
#undef cuGraphNodeGetDependentNodes
#undef cuGraphRemoveDependencies

TALLY_API CUresult cuGraphGetEdges(CUgraph graph, CUgraphNode* from, CUgraphNode* to, size_t* count) {
  return guardDriver(__func__, [&] { return getEdges(graph, from, to, nullptr, count, Api::kDriver); });
}
TALLY_API CUresult cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode* dependencies, size_t* count) {
  return guardDriver(__func__, [&] { return nodeNeighbours(node, dependencies, nullptr, count, true, Api::kDriver); });
}
TALLY_API CUresult cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode* dependents, size_t* count) {
  return guardDriver(__func__, [&] { return nodeNeighbours(node, dependents, nullptr, count, false, Api::kDriver); });
}
TALLY_API CUresult cuGraphRemoveDependencies(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to,
                                             size_t count) {
  return guardDriver(__func__, [&] { return changeDependencies(graph, from, to, nullptr, count, true, Api::kDriver); });
}
