// CUDA graphs through tallyd: stream capture on this process's streams, executable graphs and
// their launches, node queries, kernel node parameters, and explicit construction of kernel and
// device-to-device copy nodes (the other node kinds and the structure queries: graph_nodes.cc).
// tallyd holds the CUgraph / CUgraphExec; the handles here (graph_handles.h) name them by ids
// this client chose (schema/graph.capnp). Which streams capture is kept here too
// (runtime/capture_table.h), so the capture queries in stream_event.cc need no round trip.
//
// Launches and uploads are one-way like kernel launches; whatever can fail in a way the native
// runtime reports at once (begin/end capture, instantiate, node queries and changes) is a round
// trip. Handles are checked before use: a bad graph or exec gets cudaErrorInvalidValue from the
// runtime API, CUDA_ERROR_INVALID_HANDLE (CUDA_ERROR_INVALID_VALUE for null) from the driver API.
#include "client/api/graph_handles.h"
#include "client/runtime/argument_checks.h"
#include "client/runtime/arguments.h"
#include "client/runtime/capture_table.h"
#include "client/runtime/host_callback_words.h"

#include <capnp/schema.h>

#include <algorithm>
#include <optional>
#include <thread>
#include <vector>

using namespace tally::client;
using namespace tally::client::graphs;

namespace {

// Stream wire id or the error of the calls below.
CUresult resolveStream(CUstream stream, uint64_t& id) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  id = rt().streamId(stream);
  return id == 0 ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

// Forgets the graph's handles (the application may still hold stale copies, which the registry
// then refuses) and frees them.
void dropGraphHandle(GraphHandle* g) {
  handleRegistry().remove(g);
  {
    std::lock_guard lock(g->mutex);
    for (auto& [id, node] : g->nodes) {
      handleRegistry().remove(node);
      delete node;
    }
  }
  delete g;
}

// --- capture -------------------------------------------------------------------------------

CUresult beginCapture(CUstream stream, CUstreamCaptureMode mode) {
  if (mode < CU_STREAM_CAPTURE_MODE_GLOBAL || mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  uint64_t id;
  if (CUresult r = resolveStream(stream, id); r != CUDA_SUCCESS) return r;
  // As natively: the legacy default stream synchronizes with every blocking stream.
  if (isLegacyStream(stream)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (CUresult r = captureTable().admitBegin(id); r != CUDA_SUCCESS) return r;
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto b = c.initStreamBeginCapture();
    b.setStream(id);
    b.setMode(static_cast<uint32_t>(mode));
  }, &reply);
  if (r != CUDA_SUCCESS) return r;
  uint64_t captureId = reply.reply().isValue() ? reply.reply().getValue() : 0;
  auto* handle = checkedHandle<StreamHandle>(stream, HandleMagic::kStream);
  bool blocking = handle != nullptr ? (handle->flags & CU_STREAM_NON_BLOCKING) == 0 : true;  // per-thread: blocking
  captureTable().begin(id, rt().streamDevice(stream), captureId, mode, std::this_thread::get_id(), blocking);
  return CUDA_SUCCESS;
}

CUresult endCapture(CUstream stream, CUgraph* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t id;
  if (CUresult r = resolveStream(stream, id); r != CUDA_SUCCESS) return r;
  CaptureTable::Ended ended;
  if (CUresult r = captureTable().end(id, std::this_thread::get_id(), ended); r != CUDA_SUCCESS) return r;
  GraphHandle* g = newGraphHandle(rt().streamDevice(stream));
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto e = c.initStreamEndCapture();
    e.setStream(id);
    e.setGraph(g->id);
    e.setInvalidated(ended.invalidated);
  });
  // tallyd drops the graph of a capture this client invalidated, and says so; so do we.
  if (r == CUDA_SUCCESS && ended.invalidated) r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  *out = nullptr;
  if (r != CUDA_SUCCESS) {
    delete g;
    return r;
  }
  publishGraph(g, out);
  return CUDA_SUCCESS;
}

// --- executable graphs --------------------------------------------------------------------------

CUresult instantiate(CUgraphExec* out, CUgraph graph, unsigned long long flags, Api api) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GraphHandle* g = nullptr;
  if (CUresult r = checked(graph, HandleMagic::kGraph, api, g); r != CUDA_SUCCESS) return r;
  auto* e = new GraphExecHandle();
  e->id = rt().newHandleId();
  e->device = g->device;
  e->graph = g->id;
  e->origin = g;
  e->flags = flags;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto i = c.initGraphInstantiate();
    i.setGraph(g->id);
    i.setExec(e->id);
    i.setFlags(flags);
  });
  if (r != CUDA_SUCCESS) {
    delete e;
    return r;
  }
  {
    std::lock_guard lock(g->mutex);
    for (const auto& [id, node] : g->nodes) {
      if (node->type == CU_GRAPH_NODE_TYPE_HOST) e->hostNodes.emplace(id, node->host);
    }
  }
  registerHandle(e);
  *out = reinterpret_cast<CUgraphExec>(e);
  return CUDA_SUCCESS;
}

// Queues this launch's run of every host node of `e` on the client's callback thread and says
// which words and sequence each node uses. Nothing is queued on failure: a capture (its replays
// would never hand the client its turn again; tallyd refuses it too) or no word pair left.
CUresult queueHostNodes(GraphExecHandle& e, uint64_t stream,
                        std::vector<std::pair<uint32_t, HostCallbackWords::Ticket>>& tickets) {
  std::lock_guard lock(e.mutex);
  if (e.hostNodes.empty()) return CUDA_SUCCESS;
  if (captureTable().status(stream).status != CU_STREAM_CAPTURE_STATUS_NONE) {
    spdlog::warn("tally: a graph with host nodes launched into a stream capture is not supported");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  HostCallbackWords* words = rt().hostCallbackWords();
  if (words == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  for (const auto& [id, call] : e.hostNodes) {
    HostCallbackWords::Ticket ticket;
    if (!words->enqueue(hostNodeKey(e.id, id), [call] { call.fn(call.userData); }, ticket)) {
      for (const auto& queued : tickets) words->cancelLast(hostNodeKey(e.id, queued.first));
      tickets.clear();
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    tickets.emplace_back(id, ticket);
  }
  return CUDA_SUCCESS;
}

// Launch (or upload): one-way and stream-ordered, like a kernel launch.
CUresult launch(CUgraphExec exec, CUstream stream, bool upload, Api api) {
  GraphExecHandle* e = nullptr;
  if (CUresult r = checked(exec, HandleMagic::kGraphExec, api, e); r != CUDA_SUCCESS) return r;
  uint64_t id;
  if (CUresult r = resolveStream(stream, id); r != CUDA_SUCCESS) return r;
  std::vector<std::pair<uint32_t, HostCallbackWords::Ticket>> tickets;
  if (!upload) {
    if (CUresult r = queueHostNodes(*e, id, tickets); r != CUDA_SUCCESS) return r;
  }
  CUresult r = rt().post([&](wire::Call::Builder c) {
    auto l = upload ? c.initGraphUpload() : c.initGraphLaunch();
    l.setExec(e->id);
    l.setStream(id);
    if (tickets.empty()) return;
    auto hostNodes = l.initHostNodes(static_cast<unsigned>(tickets.size()));
    for (unsigned i = 0; i < tickets.size(); ++i) {
      hostNodes[i].setNode(tickets[i].first);
      hostNodes[i].setReachedWord(tickets[i].second.reachedWord);
      hostNodes[i].setDoneWord(tickets[i].second.doneWord);
      hostNodes[i].setSequence(tickets[i].second.sequence);
    }
  });
  if (r != CUDA_SUCCESS) {
    for (const auto& queued : tickets) rt().hostCallbackWords()->cancelLast(hostNodeKey(e->id, queued.first));
  }
  return r;
}

// The handle of node `id` of `g` (nullptr for 0 or a node unknown here).
CUgraphNode nodeHandle(GraphHandle* g, uint32_t id) {
  if (g == nullptr || id == 0) return nullptr;
  std::lock_guard lock(g->mutex);
  if (learnNodes(*g) != CUDA_SUCCESS) return nullptr;
  auto it = g->nodes.find(id);
  return it == g->nodes.end() ? nullptr : reinterpret_cast<CUgraphNode>(it->second);
}

// cudaGraphExecUpdate: tallyd's driver decides; resultInfo names the nodes by this client's handles.
CUresult updateExec(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info, Api api) {
  GraphExecHandle* e = nullptr;
  if (CUresult r = checked(exec, HandleMagic::kGraphExec, api, e); r != CUDA_SUCCESS) return r;
  GraphHandle* g = nullptr;
  if (CUresult r = checked(graph, HandleMagic::kGraph, api, g); r != CUDA_SUCCESS) return r;
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto u = c.initGraphExecUpdate();
    u.setExec(e->id);
    u.setGraph(g->id);
  }, &reply);
  std::optional<wire::GraphReply::Reader> answer = graphReply(reply.reply());
  if (!answer || !answer->isExecUpdate()) return r != CUDA_SUCCESS ? r : CUDA_ERROR_UNKNOWN;
  auto result = answer->getExecUpdate();
  if (info == nullptr) return r;  // null: the caller wants the status only
  GraphHandle* origin = checkedHandle<GraphHandle>(e->origin, HandleMagic::kGraph);
  if (origin != nullptr && origin->id != e->graph) origin = nullptr;  // another graph at that address
  *info = CUgraphExecUpdateResultInfo{};
  info->result = static_cast<CUgraphExecUpdateResult>(result.getResult());
  info->errorNode = nodeHandle(g, result.getErrorNode());
  info->errorFromNode = nodeHandle(origin, result.getErrorFromNode());
  return r;
}

CUresult destroyGraph(CUgraph graph, Api api) {
  GraphHandle* g = nullptr;
  if (CUresult r = checked(graph, HandleMagic::kGraph, api, g); r != CUDA_SUCCESS) return r;
  CUresult r = rt().post([&](wire::Call::Builder c) { c.initGraphDestroy().setGraph(g->id); });
  dropGraphHandle(g);
  return r;
}

CUresult destroyExec(CUgraphExec exec, Api api) {
  GraphExecHandle* e = nullptr;
  if (CUresult r = checked(exec, HandleMagic::kGraphExec, api, e); r != CUDA_SUCCESS) return r;
  handleRegistry().remove(e);
  CUresult r = rt().post([&](wire::Call::Builder c) { c.initGraphExecDestroy().setExec(e->id); });
  // Only an exec with host nodes has word pairs (asking for the words maps them on first use).
  if (HostCallbackWords* words = e->hostNodes.empty() ? nullptr : rt().hostCallbackWords(); words != nullptr) {
    for (const auto& [node, call] : e->hostNodes) words->release(hostNodeKey(e->id, node));
  }
  delete e;
  return r;
}

// --- nodes -----------------------------------------------------------------------------------

// cudaGraphGetNodes: the count when `nodes` is null; else up to *count nodes, the rest of the
// array nulled and *count lowered to the number filled.
CUresult getNodes(CUgraph graph, CUgraphNode* nodes, size_t* count, Api api) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GraphHandle* g = nullptr;
  if (CUresult r = checked(graph, HandleMagic::kGraph, api, g); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(g->mutex);
  CUresult r = learnNodes(*g);
  if (r != CUDA_SUCCESS) return r;
  if (nodes == nullptr) {
    *count = g->nodes.size();
    return CUDA_SUCCESS;
  }
  size_t filled = 0;
  for (auto it = g->nodes.begin(); it != g->nodes.end() && filled < *count; ++it) {
    nodes[filled++] = reinterpret_cast<CUgraphNode>(it->second);
  }
  for (size_t i = filled; i < *count; ++i) nodes[i] = nullptr;
  *count = filled;
  return CUDA_SUCCESS;
}

CUresult nodeType(CUgraphNode node, CUgraphNodeType* type, Api api) {
  if (type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GraphNodeHandle* n = nullptr;
  if (CUresult r = checked(node, HandleMagic::kGraphNode, api, n); r != CUDA_SUCCESS) return r;
  *type = n->type;
  return CUDA_SUCCESS;
}

// A kernel node's parameters in the form both APIs return.
struct KernelNodeView {
  FunctionHandle* function = nullptr;  // nullptr: a kernel that is none of this process's functions
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned sharedMem = 0;
  void** params = nullptr;             // into the node handle
};

void readDim3(wire::Dim3::Reader in, unsigned (&out)[3]) {
  out[0] = in.getX();
  out[1] = in.getY();
  out[2] = in.getZ();
}

CUresult kernelNodeParams(CUgraphNode node, KernelNodeView& out, Api api) {
  ReplyMessage reply;
  CUresult r = queryNode(node, CU_GRAPH_NODE_TYPE_KERNEL, api,
                         [](wire::Call::Builder c) { return c.initGraphKernelNodeGetParams(); }, reply);
  if (r != CUDA_SUCCESS) return r;
  auto* n = checkedHandle<GraphNodeHandle>(node, HandleMagic::kGraphNode);  // checked by queryNode
  if (n == nullptr) return badHandle(node, api);
  std::optional<wire::GraphReply::Reader> answer = graphReply(reply.reply());
  if (!answer || !answer->isKernelNode()) return CUDA_ERROR_UNKNOWN;
  auto k = answer->getKernelNode();
  out.function = rt().functionById(k.getFunction());
  readDim3(k.getGrid(), out.grid);
  readDim3(k.getBlock(), out.block);
  out.sharedMem = k.getSharedMem();
  std::lock_guard lock(n->graph->mutex);
  n->paramBytes.assign(k.getParams().begin(), k.getParams().end());
  n->paramPointers.clear();
  if (out.function != nullptr && n->paramBytes.size() == out.function->paramBytes) {
    for (auto [offset, size] : out.function->params) n->paramPointers.push_back(n->paramBytes.data() + offset);
    out.params = n->paramPointers.data();
  }
  return CUDA_SUCCESS;
}

// New kernel node parameters: the function, its launch shape and its arguments, packed by the
// function's layout (from `args`, or the one buffer of `extra`).
struct KernelNodeRequest {
  FunctionHandle* function = nullptr;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned sharedMem = 0;
  std::vector<uint8_t> params;
};

CUresult packNodeArguments(const FunctionHandle& f, void** args, void** extra, std::vector<uint8_t>& out) {
  if (args != nullptr || extra == nullptr) {
    out = packArguments(f.params, f.paramBytes, args);
    return CUDA_SUCCESS;
  }
  const void* buffer = nullptr;
  size_t size = 0;
  for (void** e = extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
    if (*e == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = e[1];
    if (*e == CU_LAUNCH_PARAM_BUFFER_SIZE) size = *static_cast<size_t*>(e[1]);
  }
  if ((buffer == nullptr && f.paramBytes > 0) || size < f.paramBytes) return CUDA_ERROR_INVALID_VALUE;
  out.assign(static_cast<const uint8_t*>(buffer), static_cast<const uint8_t*>(buffer) + f.paramBytes);
  return CUDA_SUCCESS;
}

void fillKernelNode(wire::KernelNodeParams::Builder p, const KernelNodeRequest& k) {
  p.setFunction(k.function->id);
  setDim3(p.initGrid(), k.grid[0], k.grid[1], k.grid[2]);
  setDim3(p.initBlock(), k.block[0], k.block[1], k.block[2]);
  p.setSharedMem(k.sharedMem);
  p.setParams(kj::arrayPtr(k.params.data(), k.params.size()));
}

// In the node's graph (exec null) or in an executable graph instantiated from that graph.
CUresult setKernelNode(CUgraphExec exec, CUgraphNode node, const KernelNodeRequest& k, Api api) {
  GraphNodeHandle* n = nullptr;
  if (CUresult r = checked(node, HandleMagic::kGraphNode, api, n); r != CUDA_SUCCESS) return r;
  GraphExecHandle* e = nullptr;
  if (exec != nullptr) {
    if (CUresult r = checked(exec, HandleMagic::kGraphExec, api, e); r != CUDA_SUCCESS) return r;
    if (e->graph != n->graph->id) return CUDA_ERROR_INVALID_VALUE;  // not a node of its graph
  }
  if (n->type != CU_GRAPH_NODE_TYPE_KERNEL || k.function == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return rt().call([&](wire::Call::Builder c) {
    auto s = c.initGraphKernelNodeSetParams();
    s.setExec(e != nullptr ? e->id : 0);
    auto ref = s.initNode();
    ref.setGraph(n->graph->id);
    ref.setNode(n->id);
    fillKernelNode(s.initParams(), k);
  });
}

// --- explicit construction ---------------------------------------------------------------------

CUresult createGraph(CUgraph* out, unsigned flags) {
  if (out == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  GraphHandle* g = newGraphHandle(currentDevice());
  g->nodesKnown = true;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto create = c.initGraphCreate();
    create.setGraph(g->id);
    create.setDevice(g->device);
  });
  if (r != CUDA_SUCCESS) {
    delete g;
    return r;
  }
  publishGraph(g, out);
  return CUDA_SUCCESS;
}

CUresult addKernelNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                       const KernelNodeRequest& k, Api api) {
  if (k.function == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return addNode(out, graph, dependencies, count, CU_GRAPH_NODE_TYPE_KERNEL,
                 [&](wire::Call::Builder c, uint64_t graphId, const std::vector<uint32_t>& ids) {
                   auto a = c.initGraphAddKernelNode();
                   a.setGraph(graphId);
                   setIds(a.initDependencies(static_cast<unsigned>(ids.size())), ids);
                   fillKernelNode(a.initParams(), k);
                 }, api);
}

// Device to device only: `height` rows of `width` bytes (tallyd checks both ranges are the
// tenant's); copies touching host memory or arrays stay NotSupported.
CUresult addCopyNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* dependencies, size_t count, const Copy2D& copy,
                     Api api) {
  if (copy.width == 0 || copy.height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!rt().findDeviceRegion(copy.dst) || !rt().findDeviceRegion(copy.src)) return CUDA_ERROR_NOT_SUPPORTED;
  return addNode(out, graph, dependencies, count, CU_GRAPH_NODE_TYPE_MEMCPY,
                 [&](wire::Call::Builder c, uint64_t graphId, const std::vector<uint32_t>& ids) {
                   auto a = c.initGraphAddMemcpyNode();
                   a.setGraph(graphId);
                   setIds(a.initDependencies(static_cast<unsigned>(ids.size())), ids);
                   a.setDst(copy.dst);
                   a.setSrc(copy.src);
                   a.setWidth(copy.width);
                   a.setHeight(copy.height);
                   a.setDstPitch(copy.dstPitch);
                   a.setSrcPitch(copy.srcPitch);
                 }, api);
}

// --- the runtime's kernel node parameters --------------------------------------------------

// cudaKernelNodeParams names the kernel by its host function (or cudaKernel_t): resolved on the
// device of `graph`'s node or graph.
CUresult runtimeRequest(const cudaKernelNodeParams* p, uint32_t device, KernelNodeRequest& out) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  // A host function, a cudaKernel_t of cudaGetKernel, or one of cudaLibraryGetKernel.
  CUresult found = rt().runtimeFunction(p->func, device, out.function);
  if (found == CUDA_ERROR_INVALID_HANDLE) return static_cast<CUresult>(cudaErrorInvalidDeviceFunction);
  if (found != CUDA_SUCCESS) return found;
  out.grid[0] = p->gridDim.x;
  out.grid[1] = p->gridDim.y;
  out.grid[2] = p->gridDim.z;
  out.block[0] = p->blockDim.x;
  out.block[1] = p->blockDim.y;
  out.block[2] = p->blockDim.z;
  out.sharedMem = p->sharedMemBytes;
  return packNodeArguments(*out.function, p->kernelParams, p->extra, out.params);
}

CUresult driverRequest(const CUDA_KERNEL_NODE_PARAMS* p, KernelNodeRequest& out) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  if (p->func == nullptr) return CUDA_ERROR_NOT_SUPPORTED;  // a CUkernel (library) node: not forwarded
  out.function = checkedHandle<FunctionHandle>(p->func, HandleMagic::kFunction);
  if (out.function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  out.grid[0] = p->gridDimX;
  out.grid[1] = p->gridDimY;
  out.grid[2] = p->gridDimZ;
  out.block[0] = p->blockDimX;
  out.block[1] = p->blockDimY;
  out.block[2] = p->blockDimZ;
  out.sharedMem = p->sharedMemBytes;
  return packNodeArguments(*out.function, p->kernelParams, p->extra, out.params);
}

uint32_t deviceOfNode(CUgraphNode node) {
  auto* n = checkedHandle<GraphNodeHandle>(node, HandleMagic::kGraphNode);
  return n != nullptr ? n->graph->device : currentDevice();
}

uint32_t deviceOfGraph(CUgraph graph) {
  auto* g = checkedHandle<GraphHandle>(graph, HandleMagic::kGraph);
  return g != nullptr ? g->device : currentDevice();
}

// A cudaMemcpy3DParms copy as a 2D device-to-device copy: linear memory, one slice.
CUresult runtimeCopy(const cudaMemcpy3DParms* p, Copy2D& out) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (p->srcArray != nullptr || p->dstArray != nullptr || p->extent.depth > 1) return CUDA_ERROR_NOT_SUPPORTED;
  if (p->kind != cudaMemcpyDeviceToDevice && p->kind != cudaMemcpyDefault) return CUDA_ERROR_NOT_SUPPORTED;
  auto at = [](const cudaPitchedPtr& ptr, const cudaPos& pos) {
    return reinterpret_cast<uint64_t>(ptr.ptr) + pos.z * ptr.pitch * ptr.ysize + pos.y * ptr.pitch + pos.x;
  };
  out = Copy2D{at(p->dstPtr, p->dstPos), p->dstPtr.pitch, at(p->srcPtr, p->srcPos), p->srcPtr.pitch,
               p->extent.width, std::max<size_t>(p->extent.height, 1)};
  return CUDA_SUCCESS;
}

CUresult runtimeNodeParams(cudaGraphNode_t node, cudaKernelNodeParams* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  KernelNodeView view;
  if (CUresult r = kernelNodeParams(reinterpret_cast<CUgraphNode>(node), view, Api::kRuntime); r != CUDA_SUCCESS) {
    return r;
  }
  const void* host = view.function != nullptr ? rt().hostFunctionOf(view.function) : nullptr;
  p->func = const_cast<void*>(host != nullptr ? host : static_cast<const void*>(view.function));
  p->gridDim = dim3(view.grid[0], view.grid[1], view.grid[2]);
  p->blockDim = dim3(view.block[0], view.block[1], view.block[2]);
  p->sharedMemBytes = view.sharedMem;
  p->kernelParams = view.params;
  p->extra = nullptr;
  return CUDA_SUCCESS;
}

CUresult driverNodeParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  KernelNodeView view;
  if (CUresult r = kernelNodeParams(node, view, Api::kDriver); r != CUDA_SUCCESS) return r;
  *p = CUDA_KERNEL_NODE_PARAMS{};
  p->func = reinterpret_cast<CUfunction>(view.function);
  p->gridDimX = view.grid[0];
  p->gridDimY = view.grid[1];
  p->gridDimZ = view.grid[2];
  p->blockDimX = view.block[0];
  p->blockDimY = view.block[1];
  p->blockDimZ = view.block[2];
  p->sharedMemBytes = view.sharedMem;
  p->kernelParams = view.params;
  return CUDA_SUCCESS;
}

// Per-thread default stream builds: a null stream means the calling thread's own stream.
cudaStream_t perThread(cudaStream_t stream) { return stream == nullptr ? cudaStreamPerThread : stream; }

}  // namespace

// --- shared with graph_nodes.cc (graph_handles.h) ---------------------------------------------

namespace tally::client::graphs {

GraphHandle* newGraphHandle(uint32_t device) {
  auto* g = new GraphHandle();
  g->id = rt().newHandleId();
  g->device = device;
  return g;
}

void publishGraph(GraphHandle* g, CUgraph* out) {
  registerHandle(g);
  *out = reinterpret_cast<CUgraph>(g);
}

GraphNodeHandle* nodeOf(GraphHandle& g, uint32_t id, CUgraphNodeType type) {
  GraphNodeHandle*& node = g.nodes[id];
  if (node == nullptr) {
    node = new GraphNodeHandle();
    node->graph = &g;
    node->id = id;
    registerHandle(node);
  }
  node->type = type;
  return node;
}

void dropNode(GraphHandle& g, uint32_t id) {
  auto it = g.nodes.find(id);
  if (it == g.nodes.end()) return;
  handleRegistry().remove(it->second);
  delete it->second;
  g.nodes.erase(it);
}

// A captured graph's nodes are learnt once: only this client adds nodes later.
CUresult learnNodes(GraphHandle& g) {
  if (g.nodesKnown) return CUDA_SUCCESS;
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) { c.initGraphGetNodes().setGraph(g.id); }, &reply);
  if (r != CUDA_SUCCESS) return r;
  std::optional<wire::GraphReply::Reader> answer = graphReply(reply.reply());
  if (!answer || !answer->isNodeTypes()) return CUDA_ERROR_UNKNOWN;
  auto types = answer->getNodeTypes();
  for (uint32_t i = 0; i < types.size(); ++i) {
    if (types[i] != wire::K_REMOVED_NODE) nodeOf(g, i + 1, static_cast<CUgraphNodeType>(types[i]));
  }
  g.nodesKnown = true;
  return CUDA_SUCCESS;
}

CUresult nodeIds(const GraphHandle& g, const CUgraphNode* nodes, size_t count, std::vector<uint32_t>& out) {
  if (count > 0 && nodes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    auto* n = checkedHandle<GraphNodeHandle>(nodes[i], HandleMagic::kGraphNode);
    if (n == nullptr || n->graph != &g) return CUDA_ERROR_INVALID_VALUE;
    out.push_back(n->id);
  }
  return CUDA_SUCCESS;
}

void setIds(capnp::List<uint32_t>::Builder list, const std::vector<uint32_t>& ids) {
  for (unsigned i = 0; i < ids.size(); ++i) list.set(i, ids[i]);
}

CUresult queryNode(CUgraphNode node, CUgraphNodeType type, Api api, const NodeQuery& init, ReplyMessage& reply) {
  GraphNodeHandle* n = nullptr;
  if (CUresult r = checked(node, HandleMagic::kGraphNode, api, n); r != CUDA_SUCCESS) return r;
  if (n->type != type) return CUDA_ERROR_INVALID_VALUE;
  return rt().call([&](wire::Call::Builder c) {
    auto ref = init(c);
    ref.setGraph(n->graph->id);
    ref.setNode(n->id);
  }, &reply);
}

CUresult changeDependencies(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to, const void* edgeData,
                            size_t count, bool remove, Api api) {
  GraphHandle* g = nullptr;
  if (CUresult r = checked(graph, HandleMagic::kGraph, api, g); r != CUDA_SUCCESS) return r;
  if (edgeData != nullptr) return CUDA_ERROR_NOT_SUPPORTED;  // programmatic edges: not forwarded
  std::lock_guard lock(g->mutex);
  std::vector<uint32_t> fromIds, toIds;
  if (CUresult r = nodeIds(*g, from, count, fromIds); r != CUDA_SUCCESS) return r;
  if (CUresult r = nodeIds(*g, to, count, toIds); r != CUDA_SUCCESS) return r;
  return rt().call([&](wire::Call::Builder c) {
    auto a = remove ? c.initGraphRemoveDependencies() : c.initGraphAddDependencies();
    a.setGraph(g->id);
    setIds(a.initFrom(static_cast<unsigned>(fromIds.size())), fromIds);
    setIds(a.initTo(static_cast<unsigned>(toIds.size())), toIds);
  });
}

CUresult addNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* dependencies, size_t count, CUgraphNodeType type,
                 const NodeFill& fill, Api api) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GraphHandle* g = nullptr;
  if (CUresult r = checked(graph, HandleMagic::kGraph, api, g); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(g->mutex);
  if (CUresult r = learnNodes(*g); r != CUDA_SUCCESS) return r;
  std::vector<uint32_t> ids;
  if (CUresult r = nodeIds(*g, dependencies, count, ids); r != CUDA_SUCCESS) return r;
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) { fill(c, g->id, ids); }, &reply);
  if (r != CUDA_SUCCESS) return r;
  if (!reply.reply().isValue()) return CUDA_ERROR_UNKNOWN;
  *out = reinterpret_cast<CUgraphNode>(nodeOf(*g, static_cast<uint32_t>(reply.reply().getValue()), type));
  return CUDA_SUCCESS;
}

}  // namespace tally::client::graphs

// --- runtime -----------------------------------------------------------------------------------

TALLY_API cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  return guardRuntime(__func__, [&] { return beginCapture(stream, static_cast<CUstreamCaptureMode>(mode)); });
}
TALLY_API cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, cudaStreamCaptureMode mode) {
  return cudaStreamBeginCapture(perThread(stream), mode);
}
TALLY_API cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  return guardRuntime(__func__, [&] { return endCapture(stream, reinterpret_cast<CUgraph*>(graph)); });
}
TALLY_API cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t* graph) {
  return cudaStreamEndCapture(perThread(stream), graph);
}
TALLY_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  return guardRuntime(__func__, [&] {
    return instantiate(reinterpret_cast<CUgraphExec*>(exec), reinterpret_cast<CUgraph>(graph), flags, Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  return guardRuntime(__func__, [&] {
    return instantiate(reinterpret_cast<CUgraphExec*>(exec), reinterpret_cast<CUgraph>(graph), flags, Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return launch(reinterpret_cast<CUgraphExec>(exec), stream, false, Api::kRuntime); });
}
TALLY_API cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t stream) {
  return cudaGraphLaunch(exec, perThread(stream));
}
TALLY_API cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return launch(reinterpret_cast<CUgraphExec>(exec), stream, true, Api::kRuntime); });
}
TALLY_API cudaError_t cudaGraphUpload_ptsz(cudaGraphExec_t exec, cudaStream_t stream) {
  return cudaGraphUpload(exec, perThread(stream));
}
TALLY_API cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  return guardRuntime(__func__, [&] { return destroyGraph(reinterpret_cast<CUgraph>(graph), Api::kRuntime); });
}
TALLY_API cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph, cudaGraphExecUpdateResultInfo* info) {
  static_assert(sizeof(cudaGraphExecUpdateResultInfo) == sizeof(CUgraphExecUpdateResultInfo));
  return guardRuntime(__func__, [&] {
    return updateExec(reinterpret_cast<CUgraphExec>(exec), reinterpret_cast<CUgraph>(graph),
                      reinterpret_cast<CUgraphExecUpdateResultInfo*>(info), Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  return guardRuntime(__func__, [&] { return destroyExec(reinterpret_cast<CUgraphExec>(exec), Api::kRuntime); });
}
TALLY_API cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  return guardRuntime(__func__, [&] {
    return getNodes(reinterpret_cast<CUgraph>(graph), reinterpret_cast<CUgraphNode*>(nodes), count, Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  return guardRuntime(__func__, [&] {
    return nodeType(reinterpret_cast<CUgraphNode>(node), reinterpret_cast<CUgraphNodeType*>(type), Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, cudaKernelNodeParams* params) {
  return guardRuntime(__func__, [&] { return runtimeNodeParams(node, params); });
}
TALLY_API cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node, const cudaKernelNodeParams* params) {
  return guardRuntime(__func__, [&] {
    KernelNodeRequest k;
    if (CUresult r = runtimeRequest(params, deviceOfNode(reinterpret_cast<CUgraphNode>(node)), k); r != CUDA_SUCCESS) {
      return r;
    }
    return setKernelNode(nullptr, reinterpret_cast<CUgraphNode>(node), k, Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                       const cudaKernelNodeParams* params) {
  return guardRuntime(__func__, [&] {
    if (exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
    KernelNodeRequest k;
    if (CUresult r = runtimeRequest(params, deviceOfNode(reinterpret_cast<CUgraphNode>(node)), k); r != CUDA_SUCCESS) {
      return r;
    }
    return setKernelNode(reinterpret_cast<CUgraphExec>(exec), reinterpret_cast<CUgraphNode>(node), k, Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphCreate(cudaGraph_t* graph, unsigned int flags) {
  return guardRuntime(__func__, [&] { return createGraph(reinterpret_cast<CUgraph*>(graph), flags); });
}
TALLY_API cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* dependencies,
                                             size_t count, const cudaKernelNodeParams* params) {
  return guardRuntime(__func__, [&] {
    KernelNodeRequest k;
    if (CUresult r = runtimeRequest(params, deviceOfGraph(reinterpret_cast<CUgraph>(graph)), k); r != CUDA_SUCCESS) {
      return r;
    }
    return addKernelNode(reinterpret_cast<CUgraphNode*>(node), reinterpret_cast<CUgraph>(graph),
                         reinterpret_cast<const CUgraphNode*>(dependencies), count, k, Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* dependencies,
                                             size_t count, const cudaMemcpy3DParms* params) {
  return guardRuntime(__func__, [&] {
    Copy2D copy{};
    if (CUresult r = runtimeCopy(params, copy); r != CUDA_SUCCESS) return r;
    return addCopyNode(reinterpret_cast<CUgraphNode*>(node), reinterpret_cast<CUgraph>(graph),
                       reinterpret_cast<const CUgraphNode*>(dependencies), count, copy, Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t* node, cudaGraph_t graph,
                                               const cudaGraphNode_t* dependencies, size_t count, void* dst,
                                               const void* src, size_t bytes, cudaMemcpyKind kind) {
  return guardRuntime(__func__, [&] {
    if (kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault) return CUDA_ERROR_NOT_SUPPORTED;
    Copy2D copy{reinterpret_cast<uint64_t>(dst), bytes, reinterpret_cast<uint64_t>(src), bytes, bytes, 1};
    return addCopyNode(reinterpret_cast<CUgraphNode*>(node), reinterpret_cast<CUgraph>(graph),
                       reinterpret_cast<const CUgraphNode*>(dependencies), count, copy, Api::kRuntime);
  });
}
TALLY_API cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t* from, const cudaGraphNode_t* to,
                                               const cudaGraphEdgeData* edgeData, size_t count) {
  return guardRuntime(__func__, [&] {
    return changeDependencies(reinterpret_cast<CUgraph>(graph), reinterpret_cast<const CUgraphNode*>(from),
                              reinterpret_cast<const CUgraphNode*>(to), edgeData, count, false, Api::kRuntime);
  });
}

// --- driver ------------------------------------------------------------------------------------

TALLY_API CUresult cuStreamBeginCapture(CUstream stream, CUstreamCaptureMode mode) {  // cuStreamBeginCapture_v2
  return guardDriver(__func__, [&] { return beginCapture(stream, mode); });
}
TALLY_API CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  return guardDriver(__func__, [&] { return endCapture(stream, graph); });
}
TALLY_API CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  return guardDriver(__func__, [&] { return instantiate(exec, graph, flags, Api::kDriver); });
}
TALLY_API CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  return guardDriver(__func__, [&] { return launch(exec, stream, false, Api::kDriver); });
}
TALLY_API CUresult cuGraphUpload(CUgraphExec exec, CUstream stream) {
  return guardDriver(__func__, [&] { return launch(exec, stream, true, Api::kDriver); });
}
TALLY_API CUresult cuGraphDestroy(CUgraph graph) {
  return guardDriver(__func__, [&] { return destroyGraph(graph, Api::kDriver); });
}
TALLY_API CUresult cuGraphExecUpdate(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {  // _v2
  return guardDriver(__func__, [&] { return updateExec(exec, graph, info, Api::kDriver); });
}
TALLY_API CUresult cuGraphExecDestroy(CUgraphExec exec) {
  return guardDriver(__func__, [&] { return destroyExec(exec, Api::kDriver); });
}
TALLY_API CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, size_t* count) {
  return guardDriver(__func__, [&] { return getNodes(graph, nodes, count, Api::kDriver); });
}
TALLY_API CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  return guardDriver(__func__, [&] { return nodeType(node, type, Api::kDriver); });
}
TALLY_API CUresult cuGraphKernelNodeGetParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* params) {  // _v2
  return guardDriver(__func__, [&] { return driverNodeParams(node, params); });
}
TALLY_API CUresult cuGraphKernelNodeSetParams(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* params) {  // _v2
  return guardDriver(__func__, [&] {
    KernelNodeRequest k;
    if (CUresult r = driverRequest(params, k); r != CUDA_SUCCESS) return r;
    return setKernelNode(nullptr, node, k, Api::kDriver);
  });
}
TALLY_API CUresult cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                  const CUDA_KERNEL_NODE_PARAMS* params) {  // _v2
  return guardDriver(__func__, [&] {
    if (exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
    KernelNodeRequest k;
    if (CUresult r = driverRequest(params, k); r != CUDA_SUCCESS) return r;
    return setKernelNode(exec, node, k, Api::kDriver);
  });
}
TALLY_API CUresult cuGraphCreate(CUgraph* graph, unsigned int flags) {
  return guardDriver(__func__, [&] { return createGraph(graph, flags); });
}
TALLY_API CUresult cuGraphAddKernelNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                                        const CUDA_KERNEL_NODE_PARAMS* params) {  // _v2
  return guardDriver(__func__, [&] {
    KernelNodeRequest k;
    if (CUresult r = driverRequest(params, k); r != CUDA_SUCCESS) return r;
    return addKernelNode(node, graph, dependencies, count, k, Api::kDriver);
  });
}
TALLY_API CUresult cuGraphAddMemcpyNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                                        const CUDA_MEMCPY3D* p, CUcontext) {
  return guardDriver(__func__, [&] {
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (p->srcMemoryType != CU_MEMORYTYPE_DEVICE || p->dstMemoryType != CU_MEMORYTYPE_DEVICE || p->Depth > 1) {
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    auto at = [](CUdeviceptr base, size_t x, size_t y, size_t z, size_t pitch, size_t height) {
      return base + z * pitch * height + y * pitch + x;
    };
    Copy2D copy{at(p->dstDevice, p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch, p->dstHeight), p->dstPitch,
                at(p->srcDevice, p->srcXInBytes, p->srcY, p->srcZ, p->srcPitch, p->srcHeight), p->srcPitch,
                p->WidthInBytes, std::max<size_t>(p->Height, 1)};
    return addCopyNode(node, graph, dependencies, count, copy, Api::kDriver);
  });
}
TALLY_API CUresult cuGraphAddDependencies(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to,
                                          const CUgraphEdgeData* edgeData, size_t count) {  // _v2
  return guardDriver(__func__, [&] { return changeDependencies(graph, from, to, edgeData, count, false, Api::kDriver); });
}

// The exports older headers bind to (no #define renames them there); cuda.h declares them only
// for the driver's own build.
#undef cuStreamBeginCapture
#undef cuGraphInstantiate
#undef cuGraphAddDependencies

// CUDA 10.0's capture had no mode argument; it behaved as a global-mode capture.
TALLY_API CUresult cuStreamBeginCapture(CUstream stream) {
  return guardDriver(__func__, [&] { return beginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL); });
}
TALLY_API CUresult cuGraphInstantiate(CUgraphExec* exec, CUgraph graph, CUgraphNode* errorNode, char* log, size_t logSize) {
  return guardDriver(__func__, [&] {
    if (errorNode != nullptr) *errorNode = nullptr;
    if (log != nullptr && logSize > 0) log[0] = '\0';
    return instantiate(exec, graph, 0, Api::kDriver);
  });
}
TALLY_API CUresult cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* errorNode, char* log,
                                         size_t logSize) {
  return cuGraphInstantiate(exec, graph, errorNode, log, logSize);
}
TALLY_API CUresult cuGraphAddDependencies(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to, size_t count) {
  return guardDriver(__func__, [&] { return changeDependencies(graph, from, to, nullptr, count, false, Api::kDriver); });
}
