// CUDA graphs: stream capture on the tenant's own streams, the graphs it yields (or that the
// client builds node by node) and their executable instances, all by the client's ids in the
// tenant's GraphTable (session/graph_table.h), so a tenant can name only its own.
//
// Capture mode. tallyd begins every capture with CU_STREAM_CAPTURE_MODE_RELAXED, whatever the
// application asked for. A mode is about threads: under GLOBAL the driver refuses "potentially
// unsafe" calls (cuMemAlloc, ...) of every other thread of the process while the capture is
// open, and in tallyd those are the session threads of all the other tenants; THREAD_LOCAL would
// still restrict this tenant's own session thread, which must keep allocating from pools and
// freeing on its private streams. The application's rules concern the application's threads,
// which only the client sees, so the client enforces them (client/runtime/capture_table.h:
// cudaMalloc in a global-mode capture gets cudaErrorStreamCaptureUnsupported there). What no mode
// allows is refused here too, because tallyd itself must never wait for captured work: a sync or
// query of a capturing stream, a copy through pinned staging, a host callback, a completion
// watch (captureConflict), and the legacy default stream while a blocking stream captures
// (legacyStreamConflict). Each refusal invalidates the capture, as natively.
//
// While a stream captures, every forwarded stream-ordered call lands in the driver's capture:
// kernel launches (the original kernel: launch_api.cc bypasses the scheduler), copies and
// memsets between device memory and shared host memory, event records and waits (forks and
// joins: other streams join the capture through the driver), graph launches (child graphs).
// The scheduler sees a graph when it is launched (Policy::runOpaque), as one unit.
#include "server/api/call_context.h"
#include "server/api/request_checks.h"

#include <capnp/schema.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

namespace tally::server::api {

namespace {

// The driver's view of a kernel node built from the wire: parameter pointers into the message,
// which the driver copies when it takes the parameters.
struct DriverKernelParams {
  CUDA_KERNEL_NODE_PARAMS node{};
  std::vector<void*> pointers;
};

// Kernel node parameters naming one of the tenant's functions on `g`, laid out by its offsets.
CUresult toDriver(CallContext& ctx, const gpu::Gpu* g, wire::KernelNodeParams::Reader in, DriverKernelParams& out) {
  session::FunctionState* f = ctx.tenant().modules().function(in.getFunction());
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (f->gpu != g) return CUDA_ERROR_INVALID_VALUE;
  auto buffer = in.getParams();
  if (buffer.size() != f->paramBytes) return CUDA_ERROR_INVALID_VALUE;
  out.pointers.resize(f->params.size());
  for (size_t i = 0; i < f->params.size(); ++i) {
    out.pointers[i] = const_cast<uint8_t*>(buffer.begin()) + f->params[i].first;
  }
  out.node.func = f->function;
  out.node.gridDimX = in.getGrid().getX();
  out.node.gridDimY = in.getGrid().getY();
  out.node.gridDimZ = in.getGrid().getZ();
  out.node.blockDimX = in.getBlock().getX();
  out.node.blockDimY = in.getBlock().getY();
  out.node.blockDimZ = in.getBlock().getZ();
  out.node.sharedMemBytes = in.getSharedMem();
  out.node.kernelParams = out.pointers.data();
  return CUDA_SUCCESS;
}

// A kernel node's parameter bytes as the client packs them: by the function's offsets, from the
// driver's per-parameter copies (or its one buffer, for a node given `extra`).
std::vector<uint8_t> parameterBytes(const session::FunctionState& f, const CUDA_KERNEL_NODE_PARAMS& p) {
  std::vector<uint8_t> bytes(f.paramBytes);
  if (p.kernelParams != nullptr) {
    for (size_t i = 0; i < f.params.size(); ++i) {
      auto [offset, size] = f.params[i];
      if (p.kernelParams[i] != nullptr) std::memcpy(bytes.data() + offset, p.kernelParams[i], size);
    }
    return bytes;
  }
  for (void** e = p.extra; e != nullptr && *e != CU_LAUNCH_PARAM_END; e += 2) {
    if (*e == CU_LAUNCH_PARAM_BUFFER_POINTER && e[1] != nullptr) std::memcpy(bytes.data(), e[1], bytes.size());
  }
  return bytes;
}

void fillKernelNode(wire::KernelNodeParams::Builder out, uint64_t function, const CUDA_KERNEL_NODE_PARAMS& p,
                    const std::vector<uint8_t>& params) {
  out.setFunction(function);
  auto grid = out.initGrid();
  grid.setX(p.gridDimX);
  grid.setY(p.gridDimY);
  grid.setZ(p.gridDimZ);
  auto block = out.initBlock();
  block.setX(p.blockDimX);
  block.setY(p.blockDimY);
  block.setZ(p.blockDimZ);
  out.setSharedMem(p.sharedMemBytes);
  out.setParams(kj::arrayPtr(params.data(), params.size()));
}

// The nodes `ids` name in `g` (dependencies, edges); false if one is not a node of it.
bool resolveNodes(session::GraphTable& graphs, session::GraphState& g, capnp::List<uint32_t>::Reader ids,
                  std::vector<CUgraphNode>& out) {
  out.reserve(ids.size());
  for (uint32_t id : ids) {
    CUgraphNode n = graphs.node(g, id);
    if (n == nullptr) return false;
    out.push_back(n);
  }
  return true;
}

// Answers a node just added to `g` with its id (the next one).
void finishAdded(CallContext& ctx, session::GraphState& g, CUresult r, CUgraphNode node) {
  if (r != CUDA_SUCCESS) return ctx.finish(r);
  g.nodes.push_back(node);
  uint64_t id = g.nodes.size();
  ctx.finish(CUDA_SUCCESS, [id](wire::Reply::Builder reply) { reply.setValue(id); });
}

// --- capture -----------------------------------------------------------------------------

void beginCapture(CallContext& ctx, wire::BeginCapture::Reader args) {
  session::Tenant& t = ctx.tenant();
  session::StreamState* s = t.streams().stream(args.getStream());
  if (s == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  if (args.getMode() > CU_STREAM_CAPTURE_MODE_RELAXED) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  // As natively: the legacy default stream synchronizes with every blocking stream.
  if (s->legacyDefault) return ctx.finish(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  if (t.streams().capturing(*s)) return ctx.finish(CUDA_ERROR_ILLEGAL_STATE);
  s->gpu->makeCurrent();
  t.streams().markCaptureStart(*s);
  if (CUresult r = cuStreamBeginCapture(s->stream, CU_STREAM_CAPTURE_MODE_RELAXED); r != CUDA_SUCCESS) {
    return ctx.finish(r);
  }
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  cuStreamGetCaptureInfo(s->stream, &status, &id, nullptr, nullptr, nullptr, nullptr);
  t.graphs().addCapture(s->id, session::CaptureState{s->gpu, s->stream, id, false});
  ctx.finish(CUDA_SUCCESS, [id](wire::Reply::Builder reply) { reply.setValue(id); });
}

void endCapture(CallContext& ctx, wire::EndCapture::Reader args) {
  session::Tenant& t = ctx.tenant();
  session::StreamState* s = t.streams().stream(args.getStream());
  if (s == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  if (t.graphs().capture(s->id) == nullptr) {
    // A stream that joined another stream's capture, or one that does not capture at all.
    return ctx.finish(t.streams().capturing(*s) ? CUDA_ERROR_STREAM_CAPTURE_UNMATCHED : CUDA_ERROR_ILLEGAL_STATE);
  }
  CUresult admitted = t.graphs().admitGraph(args.getGraph());
  s->gpu->makeCurrent();
  CUgraph graph = nullptr;
  CUresult r = cuStreamEndCapture(s->stream, &graph);
  bool invalidated = t.graphs().takeCapture(s->id)->invalidated || args.getInvalidated();
  if (r == CUDA_SUCCESS && invalidated) r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (r == CUDA_SUCCESS) r = admitted;
  if (r != CUDA_SUCCESS) {
    if (graph != nullptr) cuGraphDestroy(graph);
    return ctx.finish(r);
  }
  t.graphs().insertGraph(args.getGraph(), session::GraphState{s->gpu, graph, {}, false, {}});
  ctx.finish(CUDA_SUCCESS);
}

// --- executable graphs ----------------------------------------------------------------------

void instantiate(CallContext& ctx, wire::GraphInstantiate::Reader args) {
  session::GraphTable& graphs = ctx.tenant().graphs();
  session::GraphState* g = graphs.graph(args.getGraph());
  if (g == nullptr) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  if (CUresult r = graphs.admitExec(args.getExec()); r != CUDA_SUCCESS) return ctx.finish(r);
  g->gpu->makeCurrent();
  CUgraphExec exec = nullptr;
  CUresult r = cuGraphInstantiateWithFlags(&exec, g->graph, args.getFlags());
  if (r == CUDA_SUCCESS) {
    session::GraphExecState e{g->gpu, exec, args.getGraph(), {}};
    for (uint32_t id : g->hostNodes) e.hostNodes.emplace(id, graphs.node(*g, id));
    graphs.insertExec(args.getExec(), std::move(e));
  }
  ctx.finish(r);
}

// The executable graph and the stream of a launch or upload, ordered for new work; nullptr after
// answering the call's error.
session::StreamState* launchStream(CallContext& ctx, wire::GraphLaunch::Reader args, session::GraphExecState*& e) {
  e = ctx.tenant().graphs().exec(args.getExec());
  if (e == nullptr) {
    ctx.finish(CUDA_ERROR_INVALID_VALUE);
    return nullptr;
  }
  session::StreamState* s = streamForWork(ctx, args.getStream());
  if (s == nullptr || s->gpu != e->gpu) {
    ctx.finish(s == nullptr ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE);
    return nullptr;
  }
  return s;
}

// A host node call refused, with the reason in tallyd's log.
CUresult hostNodeRefusal(CallContext& ctx, const std::string& why, CUresult status) {
  spdlog::warn("tenant {} ({}): {}", ctx.tenant().id(), ctx.tenant().name(), why);
  return status;
}

// What one launch of an executable graph's host node does: write its sequence to the client's
// `reached` word, then wait until the client's `done` word holds it.
struct HostNodeWords {
  CUgraphNode node;
  CUstreamBatchMemOpParams ops[2];
};

void setHostNodeOps(CUdeviceptr reached, CUdeviceptr done, uint32_t sequence, CUstreamBatchMemOpParams (&ops)[2]) {
  ops[0] = CUstreamBatchMemOpParams{};
  ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  ops[0].writeValue.address = reached;
  ops[0].writeValue.value = sequence;
  ops[0].writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
  ops[1] = CUstreamBatchMemOpParams{};
  ops[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  ops[1].waitValue.address = done;
  ops[1].waitValue.value = sequence;
  ops[1].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
}

CUDA_BATCH_MEM_OP_NODE_PARAMS hostNodeParams(gpu::Gpu& g, CUstreamBatchMemOpParams (&ops)[2]) {
  CUDA_BATCH_MEM_OP_NODE_PARAMS p{};
  p.ctx = g.context();
  p.count = 2;
  p.paramArray = ops;
  return p;
}

// The words of every host node of `e` for this launch, checked: each node once, each word in
// memory the client shares with tallyd; the done words are held for the tenant's end.
CUresult hostNodeWords(CallContext& ctx, const session::GraphExecState& e,
                       capnp::List<wire::HostNodeLaunch>::Reader launches, std::vector<HostNodeWords>& out) {
  if (launches.size() != e.hostNodes.size()) {
    return hostNodeRefusal(ctx, fmt::format("graph launch: {} host node words for {} host nodes", launches.size(),
                                            e.hostNodes.size()), CUDA_ERROR_INVALID_VALUE);
  }
  for (auto l : launches) {
    auto node = e.hostNodes.find(l.getNode());
    auto reached = ctx.tenant().hostMappings().sharedWord(l.getReachedWord());
    auto done = ctx.tenant().hostMappings().sharedWord(l.getDoneWord());
    if (node == e.hostNodes.end() || node->second == nullptr || !reached || !done) {
      return hostNodeRefusal(ctx, fmt::format("graph launch: node {} is no host node, or its words {:#x}/{:#x} are not "
                                              "in shared memory", l.getNode(), l.getReachedWord(), l.getDoneWord()),
                             CUDA_ERROR_INVALID_VALUE);
    }
    HostNodeWords w{node->second, {}};
    setHostNodeOps(reached->device, done->device, l.getSequence(), w.ops);
    out.push_back(w);
    ctx.tenant().holdSharedDoneWord(done->local, l.getSequence());
  }
  return CUDA_SUCCESS;
}

// Points every host node of `exec` at this launch's words: an executable graph's node parameters
// apply to the launches that follow, so this runs right before the launch it belongs to.
CUresult setHostNodeWords(CUgraphExec exec, gpu::Gpu& g, std::vector<HostNodeWords>& words) {
  for (HostNodeWords& w : words) {
    CUDA_BATCH_MEM_OP_NODE_PARAMS p = hostNodeParams(g, w.ops);
    if (CUresult r = cuGraphExecBatchMemOpNodeSetParams(exec, w.node, &p); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

void launchGraph(CallContext& ctx, wire::GraphLaunch::Reader args) {
  session::GraphExecState* e = nullptr;
  session::StreamState* s = launchStream(ctx, args, e);
  if (s == nullptr) return;
  bool capturing = ctx.tenant().streams().capturing(*s);
  // Replays of the capture would never reach the client's callbacks again.
  if (capturing && !e->hostNodes.empty()) {
    return ctx.finish(hostNodeRefusal(ctx, "a graph with host nodes launched into a capture (not supported)",
                                      CUDA_ERROR_NOT_SUPPORTED));
  }
  std::vector<HostNodeWords> words;
  if (CUresult r = hostNodeWords(ctx, *e, args.getHostNodes(), words); r != CUDA_SUCCESS) return ctx.finish(r);
  scheduler::Policy* policy = ctx.services().policy;
  auto submit = [exec = e->exec, gpu = s->gpu, stream = s->stream, words = std::move(words)]() mutable {
    if (CUresult r = setHostNodeWords(exec, *gpu, words); r != CUDA_SUCCESS) return r;
    return cuGraphLaunch(exec, stream);
  };
  // Into a capturing stream the graph becomes a child graph of that capture: nothing runs yet.
  if (policy == nullptr || capturing) return ctx.finish(submit());
  scheduler::OpaqueWork w = opaqueWork(ctx, *s->gpu);
  w.enqueue = [submit, stream = s->stream](CUstream& used) mutable {
    used = stream;
    return submit();
  };
  ctx.finish(policy->runOpaque(w));
}

void uploadGraph(CallContext& ctx, wire::GraphLaunch::Reader args) {
  session::GraphExecState* e = nullptr;
  session::StreamState* s = launchStream(ctx, args, e);
  if (s == nullptr) return;
  ctx.finish(cuGraphUpload(e->exec, s->stream));
}

// Destroying a graph leaves its executable graphs working; an executable graph still running
// is freed by the driver once it completes.
void destroyGraph(CallContext& ctx, uint64_t id) {
  session::GraphTable& graphs = ctx.tenant().graphs();
  std::optional<session::GraphState> g = graphs.takeGraph(id);
  if (!g) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  if (graphs.hostNodesInUse(id)) {
    graphs.retireGraph(id, std::move(*g));  // the handle goes; the driver's graph stays for its execs
    return ctx.finish(CUDA_SUCCESS);
  }
  g->gpu->makeCurrent();
  ctx.finish(cuGraphDestroy(g->graph));
}

void destroyExec(CallContext& ctx, uint64_t id) {
  std::optional<session::GraphExecState> e = ctx.tenant().graphs().takeExec(id);
  if (!e) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  e->gpu->makeCurrent();
  ctx.finish(cuGraphExecDestroy(e->exec));
}

// --- nodes ---------------------------------------------------------------------------------

void getNodes(CallContext& ctx, uint64_t id) {
  session::GraphTable& graphs = ctx.tenant().graphs();
  session::GraphState* g = graphs.graph(id);
  if (g == nullptr) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  g->gpu->makeCurrent();
  if (CUresult r = graphs.listNodes(*g); r != CUDA_SUCCESS) return ctx.finish(r);
  std::vector<uint8_t> types(g->nodes.size(), wire::K_REMOVED_NODE);
  for (size_t i = 0; i < types.size(); ++i) {
    if (g->nodes[i] == nullptr) continue;  // destroyed: its id is never reused
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
    if (CUresult r = cuGraphNodeGetType(g->nodes[i], &type); r != CUDA_SUCCESS) return ctx.finish(r);
    if (g->hostNodes.count(static_cast<uint32_t>(i + 1)) != 0) type = CU_GRAPH_NODE_TYPE_HOST;
    types[i] = static_cast<uint8_t>(type);
  }
  ctx.finish(CUDA_SUCCESS, [&](wire::Reply::Builder reply) {
    auto list = reply.initGraph().initNodeTypes(static_cast<unsigned>(types.size()));
    for (unsigned i = 0; i < types.size(); ++i) list.set(i, types[i]);
  });
}

// A node of one of the tenant's graphs of `wanted` type (any type: nullopt), or nullptr
// (INVALID_VALUE, as natively for a node of another kind).
CUgraphNode nodeOfType(CallContext& ctx, wire::GraphNodeRef::Reader ref, std::optional<CUgraphNodeType> wanted,
                       session::GraphState*& g) {
  g = ctx.tenant().graphs().graph(ref.getGraph());
  if (g == nullptr) return nullptr;
  g->gpu->makeCurrent();
  CUgraphNode node = ctx.tenant().graphs().node(*g, ref.getNode());
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  if (node == nullptr || cuGraphNodeGetType(node, &type) != CUDA_SUCCESS) return nullptr;
  return !wanted || type == *wanted ? node : nullptr;
}

CUgraphNode kernelNode(CallContext& ctx, wire::GraphNodeRef::Reader ref, session::GraphState*& g) {
  return nodeOfType(ctx, ref, CU_GRAPH_NODE_TYPE_KERNEL, g);
}

// The executable graph `exec` names, instantiated from the graph of `node`; false if it is not one.
bool execOfNodesGraph(CallContext& ctx, uint64_t exec, wire::GraphNodeRef::Reader node, session::GraphExecState*& e) {
  e = ctx.tenant().graphs().exec(exec);
  return e != nullptr && e->graph == node.getGraph();
}

void getKernelNodeParams(CallContext& ctx, wire::GraphNodeRef::Reader args) {
  session::GraphState* g = nullptr;
  CUgraphNode node = kernelNode(ctx, args, g);
  if (node == nullptr) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  CUDA_KERNEL_NODE_PARAMS p{};
  if (CUresult r = cuGraphKernelNodeGetParams(node, &p); r != CUDA_SUCCESS) return ctx.finish(r);
  // The node names a driver function; the client knows it by the tenant's handle only.
  uint64_t function = ctx.tenant().modules().functionIdOf(p.func);
  session::FunctionState* f = ctx.tenant().modules().function(function);
  std::vector<uint8_t> params = f != nullptr ? parameterBytes(*f, p) : std::vector<uint8_t>{};
  ctx.finish(CUDA_SUCCESS, [&](wire::Reply::Builder reply) {
    fillKernelNode(reply.initGraph().initKernelNode(), function, p, params);
  });
}

// In the graph (exec 0), or in an executable graph instantiated from the node's graph.
void setKernelNodeParams(CallContext& ctx, wire::KernelNodeSetParams::Reader args) {
  session::GraphExecState* e = nullptr;
  if (args.getExec() != 0 && !execOfNodesGraph(ctx, args.getExec(), args.getNode(), e)) {
    return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  }
  session::GraphState* g = nullptr;
  CUgraphNode node = kernelNode(ctx, args.getNode(), g);
  if (node == nullptr) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  DriverKernelParams p;
  if (CUresult r = toDriver(ctx, g->gpu, args.getParams(), p); r != CUDA_SUCCESS) return ctx.finish(r);
  ctx.finish(e != nullptr ? cuGraphExecKernelNodeSetParams(e->exec, node, &p.node)
                          : cuGraphKernelNodeSetParams(node, &p.node));
}

// --- explicit construction ---------------------------------------------------------------------

void createGraph(CallContext& ctx, wire::GraphCreate::Reader args) {
  gpu::Gpu* g = ctx.tenant().gpu(args.getDevice());
  if (g == nullptr) return ctx.finish(CUDA_ERROR_INVALID_DEVICE);
  if (CUresult r = ctx.tenant().graphs().admitGraph(args.getGraph()); r != CUDA_SUCCESS) return ctx.finish(r);
  g->makeCurrent();
  CUgraph graph = nullptr;
  CUresult r = cuGraphCreate(&graph, 0);
  if (r == CUDA_SUCCESS) ctx.tenant().graphs().insertGraph(args.getGraph(), session::GraphState{g, graph, {}, true, {}});
  ctx.finish(r);
}

// The graph a node is added to, its nodes listed (ids of added nodes follow the listed ones),
// and the dependencies; nullptr after answering the call's error.
session::GraphState* graphToExtend(CallContext& ctx, uint64_t id, capnp::List<uint32_t>::Reader dependencies,
                                   std::vector<CUgraphNode>& nodes) {
  session::GraphTable& graphs = ctx.tenant().graphs();
  session::GraphState* g = graphs.graph(id);
  if (g == nullptr) {
    ctx.finish(CUDA_ERROR_INVALID_VALUE);
    return nullptr;
  }
  g->gpu->makeCurrent();
  if (CUresult r = graphs.listNodes(*g); r != CUDA_SUCCESS) {
    ctx.finish(r);
    return nullptr;
  }
  if (!resolveNodes(graphs, *g, dependencies, nodes)) {
    ctx.finish(CUDA_ERROR_INVALID_VALUE);
    return nullptr;
  }
  return g;
}

void addKernelNode(CallContext& ctx, wire::AddKernelNode::Reader args) {
  std::vector<CUgraphNode> dependencies;
  session::GraphState* g = graphToExtend(ctx, args.getGraph(), args.getDependencies(), dependencies);
  if (g == nullptr) return;
  DriverKernelParams p;
  if (CUresult r = toDriver(ctx, g->gpu, args.getParams(), p); r != CUDA_SUCCESS) return ctx.finish(r);
  CUgraphNode node = nullptr;
  CUresult r = cuGraphAddKernelNode(&node, g->graph, dependencies.data(), dependencies.size(), &p.node);
  finishAdded(ctx, *g, r, node);
}

// Device to device within the tenant's memory on the graph's GPU, checked as a copy call is.
void addMemcpyNode(CallContext& ctx, wire::AddMemcpyNode::Reader args) {
  std::vector<CUgraphNode> dependencies;
  session::GraphState* g = graphToExtend(ctx, args.getGraph(), args.getDependencies(), dependencies);
  if (g == nullptr) return;
  uint64_t height = std::max<uint64_t>(args.getHeight(), 1);
  PitchedRegion src{args.getWidth(), height, pitchOr(args.getSrcPitch(), args.getWidth())};
  PitchedRegion dst{args.getWidth(), height, pitchOr(args.getDstPitch(), args.getWidth())};
  std::optional<uint64_t> srcExtent = regionExtent(src), dstExtent = regionExtent(dst);
  const session::MemoryTable& memory = ctx.tenant().memory();
  if (args.getWidth() == 0 || !srcExtent || !dstExtent || memory.ownerOf(args.getSrc(), *srcExtent) != g->gpu ||
      memory.ownerOf(args.getDst(), *dstExtent) != g->gpu) {
    return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  }
  CUDA_MEMCPY3D p{};
  p.srcMemoryType = p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  p.srcDevice = args.getSrc();
  p.srcPitch = src.pitch;
  p.srcHeight = height;
  p.dstDevice = args.getDst();
  p.dstPitch = dst.pitch;
  p.dstHeight = height;
  p.WidthInBytes = args.getWidth();
  p.Height = height;
  p.Depth = 1;
  CUgraphNode node = nullptr;
  CUresult r = cuGraphAddMemcpyNode(&node, g->graph, dependencies.data(), dependencies.size(), &p, g->gpu->context());
  finishAdded(ctx, *g, r, node);
}

// Adds the edges, or removes them (`remove`).
void changeDependencies(CallContext& ctx, wire::AddDependencies::Reader args, bool remove) {
  std::vector<CUgraphNode> from, to;
  session::GraphState* g = graphToExtend(ctx, args.getGraph(), args.getFrom(), from);
  if (g == nullptr) return;
  if (!resolveNodes(ctx.tenant().graphs(), *g, args.getTo(), to) || from.size() != to.size()) {
    return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  }
  ctx.finish(remove ? cuGraphRemoveDependencies(g->graph, from.data(), to.data(), nullptr, from.size())
                    : cuGraphAddDependencies(g->graph, from.data(), to.data(), nullptr, from.size()));
}

// A name that is not the tenant's (memory, an event, a graph): logged with the tenant, what named
// it and the id, and answered with the native error.
CUresult refused(CallContext& ctx, const char* what, uint64_t id, CUresult status) {
  spdlog::warn("tenant {} ({}): {} {:#x} refused: not the tenant's", ctx.tenant().id(), ctx.tenant().name(), what, id);
  return status;
}

// The memset a node does: into the tenant's memory on the graph's GPU, checked as a memset
// call is (width in elements of 1, 2 or 4 bytes, `height` rows `pitch` bytes apart).
CUresult memsetNodeParams(CallContext& ctx, const gpu::Gpu* g, wire::Memset::Reader in, CUDA_MEMSET_NODE_PARAMS& out) {
  unsigned elementSize = in.getElementSize();
  if (elementSize != 1 && elementSize != 2 && elementSize != 4) return CUDA_ERROR_INVALID_VALUE;
  std::optional<uint64_t> rowBytes = checkedProduct(in.getWidth(), elementSize);
  if (in.getWidth() == 0 || !rowBytes) return CUDA_ERROR_INVALID_VALUE;
  uint64_t height = std::max<uint64_t>(in.getHeight(), 1);
  std::optional<uint64_t> extent = regionExtent(PitchedRegion{*rowBytes, height, pitchOr(in.getPitch(), *rowBytes)});
  if (!extent) return CUDA_ERROR_INVALID_VALUE;
  if (ctx.tenant().memory().ownerOf(in.getDst(), *extent) != g) {
    return refused(ctx, "memset node into memory at", in.getDst(), CUDA_ERROR_INVALID_VALUE);
  }
  out = CUDA_MEMSET_NODE_PARAMS{};
  out.dst = in.getDst();
  out.pitch = pitchOr(in.getPitch(), *rowBytes);
  out.value = in.getValue();
  out.elementSize = elementSize;
  out.width = in.getWidth();
  out.height = height;
  return CUDA_SUCCESS;
}

// One of the tenant's events on the graph's GPU: CUDA_ERROR_INVALID_HANDLE for an id that is not
// (another tenant's included), as for a record of an unknown event.
CUresult tenantEvent(CallContext& ctx, const gpu::Gpu* g, uint64_t id, CUevent& out) {
  session::EventState* e = ctx.tenant().streams().event(id);
  if (e == nullptr) return refused(ctx, "event node of event", id, CUDA_ERROR_INVALID_HANDLE);
  if (e->gpu != g) return CUDA_ERROR_INVALID_VALUE;
  out = e->event;
  return CUDA_SUCCESS;
}

// A host node: to the driver a batch of two memory operations on placeholder words (a write, and
// a wait that passes), which every launch replaces with the client's words (launchGraph). Only
// clients that share memory with tallyd can have their words waited on.
CUresult addHostNode(CallContext& ctx, session::GraphState& g, const std::vector<CUgraphNode>& deps, CUgraphNode& node) {
  if (ctx.tenant().hostMappings().count() == 0) {
    return hostNodeRefusal(ctx, "host node: the client shares no memory with tallyd (TCP)", CUDA_ERROR_NOT_SUPPORTED);
  }
  std::optional<CUdeviceptr> words = ctx.tenant().graphs().placeholderWords(g.gpu);
  if (!words) return CUDA_ERROR_OUT_OF_MEMORY;
  CUstreamBatchMemOpParams ops[2];
  setHostNodeOps(*words, *words + sizeof(uint32_t), 0, ops);  // writes 0, waits for >= 0: passes
  CUDA_BATCH_MEM_OP_NODE_PARAMS p = hostNodeParams(*g.gpu, ops);
  return cuGraphAddBatchMemOpNode(&node, g.graph, deps.data(), deps.size(), &p);
}

// Empty, memset, event, child graph and host nodes: whatever names memory, an event or a graph
// names the tenant's own.
void addNode(CallContext& ctx, wire::AddNode::Reader args) {
  std::vector<CUgraphNode> deps;
  session::GraphState* g = graphToExtend(ctx, args.getGraph(), args.getDependencies(), deps);
  if (g == nullptr) return;
  CUgraphNode node = nullptr;
  CUresult r = CUDA_SUCCESS;
  CUevent event = nullptr;
  switch (args.which()) {
    case wire::AddNode::EMPTY:
      r = cuGraphAddEmptyNode(&node, g->graph, deps.data(), deps.size());
      break;
    case wire::AddNode::MEMSET: {
      CUDA_MEMSET_NODE_PARAMS p;
      r = memsetNodeParams(ctx, g->gpu, args.getMemset(), p);
      if (r == CUDA_SUCCESS) r = cuGraphAddMemsetNode(&node, g->graph, deps.data(), deps.size(), &p, g->gpu->context());
      break;
    }
    case wire::AddNode::EVENT_RECORD:
      r = tenantEvent(ctx, g->gpu, args.getEventRecord(), event);
      if (r == CUDA_SUCCESS) r = cuGraphAddEventRecordNode(&node, g->graph, deps.data(), deps.size(), event);
      break;
    case wire::AddNode::EVENT_WAIT:
      r = tenantEvent(ctx, g->gpu, args.getEventWait(), event);
      if (r == CUDA_SUCCESS) r = cuGraphAddEventWaitNode(&node, g->graph, deps.data(), deps.size(), event);
      break;
    case wire::AddNode::CHILD_GRAPH: {
      // The driver embeds a copy: the child may be changed or destroyed afterwards.
      session::GraphState* child = ctx.tenant().graphs().graph(args.getChildGraph());
      if (child == nullptr) return ctx.finish(refused(ctx, "child graph node of graph", args.getChildGraph(),
                                                      CUDA_ERROR_INVALID_VALUE));
      if (child->gpu != g->gpu || child == g) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
      // Launches set host nodes' words on the executable graph's own nodes only.
      if (!child->hostNodes.empty()) {
        return ctx.finish(hostNodeRefusal(ctx, "a graph with host nodes as a child graph (not supported)",
                                          CUDA_ERROR_NOT_SUPPORTED));
      }
      r = cuGraphAddChildGraphNode(&node, g->graph, deps.data(), deps.size(), child->graph);
      break;
    }
    case wire::AddNode::HOST:
      r = addHostNode(ctx, *g, deps, node);
      if (r == CUDA_SUCCESS) g->hostNodes.insert(static_cast<uint32_t>(g->nodes.size() + 1));
      break;
    default: r = CUDA_ERROR_NOT_SUPPORTED;
  }
  finishAdded(ctx, *g, r, node);
}

// Node ids of the driver's `nodes` in `g`, or false for a node tallyd did not list (none is).
bool idsOf(const session::GraphState& g, const std::vector<CUgraphNode>& nodes, capnp::List<uint32_t>::Builder out) {
  for (unsigned i = 0; i < nodes.size(); ++i) {
    auto at = std::find(g.nodes.begin(), g.nodes.end(), nodes[i]);
    if (at == g.nodes.end() || nodes[i] == nullptr) return false;
    out.set(i, static_cast<uint32_t>(at - g.nodes.begin()) + 1);
  }
  return true;
}

void getEdges(CallContext& ctx, uint64_t id) {
  std::vector<CUgraphNode> none;
  session::GraphState* g = graphToExtend(ctx, id, {}, none);
  if (g == nullptr) return;
  size_t count = 0;
  if (CUresult r = cuGraphGetEdges(g->graph, nullptr, nullptr, nullptr, &count); r != CUDA_SUCCESS) return ctx.finish(r);
  std::vector<CUgraphNode> from(count), to(count);
  if (count > 0) {
    if (CUresult r = cuGraphGetEdges(g->graph, from.data(), to.data(), nullptr, &count); r != CUDA_SUCCESS) {
      return ctx.finish(r);
    }
    from.resize(count);
    to.resize(count);
  }
  bool known = true;
  ctx.finish(CUDA_SUCCESS, [&](wire::Reply::Builder reply) {
    auto edges = reply.initGraph().initEdges();
    known = idsOf(*g, from, edges.initFrom(static_cast<unsigned>(count))) &&
            idsOf(*g, to, edges.initTo(static_cast<unsigned>(count)));
  });
  if (!known) spdlog::warn("tenant {}: graph {} has an edge to a node tallyd never listed", ctx.tenant().id(), id);
}

// The node's id stays taken (ids are positions), so the ids of the others do not move.
void destroyNode(CallContext& ctx, wire::GraphNodeRef::Reader args) {
  std::vector<CUgraphNode> node;
  session::GraphState* g = graphToExtend(ctx, args.getGraph(), {}, node);
  if (g == nullptr) return;
  CUgraphNode n = ctx.tenant().graphs().node(*g, args.getNode());
  if (n == nullptr) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  if (g->hostNodes.count(args.getNode()) != 0 && ctx.tenant().graphs().hostNodesInUse(args.getGraph())) {
    return ctx.finish(hostNodeRefusal(ctx, "destroying a host node of a graph with live executable graphs (not supported)",
                                      CUDA_ERROR_NOT_SUPPORTED));
  }
  if (CUresult r = cuGraphDestroyNode(n); r != CUDA_SUCCESS) return ctx.finish(r);
  g->nodes[args.getNode() - 1] = nullptr;
  g->hostNodes.erase(args.getNode());
  ctx.finish(CUDA_SUCCESS);
}

// The clone's nodes take the original's ids (a destroyed node's id stays empty in both).
void cloneGraph(CallContext& ctx, wire::GraphClone::Reader args) {
  std::vector<CUgraphNode> none;
  session::GraphState* g = graphToExtend(ctx, args.getGraph(), {}, none);
  if (g == nullptr) return;
  session::GraphTable& graphs = ctx.tenant().graphs();
  if (CUresult r = graphs.admitGraph(args.getClone()); r != CUDA_SUCCESS) return ctx.finish(r);
  CUgraph clone = nullptr;
  if (CUresult r = cuGraphClone(&clone, g->graph); r != CUDA_SUCCESS) return ctx.finish(r);
  std::vector<CUgraphNode> nodes(g->nodes.size(), nullptr);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (g->nodes[i] == nullptr) continue;
    if (CUresult r = cuGraphNodeFindInClone(&nodes[i], g->nodes[i], clone); r != CUDA_SUCCESS) {
      cuGraphDestroy(clone);
      return ctx.finish(r);
    }
  }
  graphs.insertGraph(args.getClone(), session::GraphState{g->gpu, clone, std::move(nodes), true, g->hostNodes});
  ctx.finish(CUDA_SUCCESS);
}

// --- memset node parameters and enabled nodes ------------------------------------------------------

void getMemsetNodeParams(CallContext& ctx, wire::GraphNodeRef::Reader args) {
  session::GraphState* g = nullptr;
  CUgraphNode node = nodeOfType(ctx, args, CU_GRAPH_NODE_TYPE_MEMSET, g);
  if (node == nullptr) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  CUDA_MEMSET_NODE_PARAMS p{};
  if (CUresult r = cuGraphMemsetNodeGetParams(node, &p); r != CUDA_SUCCESS) return ctx.finish(r);
  ctx.finish(CUDA_SUCCESS, [&](wire::Reply::Builder reply) {
    auto m = reply.initGraph().initMemsetNode();
    m.setDst(p.dst);
    m.setValue(p.value);
    m.setWidth(p.width);
    m.setHeight(p.height);
    m.setPitch(p.pitch);
    m.setElementSize(static_cast<uint8_t>(p.elementSize));
  });
}

// In the graph (exec 0), or in an executable graph instantiated from the node's graph; the new
// destination is checked as a new memset node's is.
void setMemsetNodeParams(CallContext& ctx, wire::MemsetNodeSetParams::Reader args) {
  auto target = args.getTarget();
  session::GraphExecState* e = nullptr;
  if (target.getExec() != 0 && !execOfNodesGraph(ctx, target.getExec(), target.getNode(), e)) {
    return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  }
  session::GraphState* g = nullptr;
  CUgraphNode node = nodeOfType(ctx, target.getNode(), CU_GRAPH_NODE_TYPE_MEMSET, g);
  if (node == nullptr) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  CUDA_MEMSET_NODE_PARAMS p;
  if (CUresult r = memsetNodeParams(ctx, g->gpu, args.getParams(), p); r != CUDA_SUCCESS) return ctx.finish(r);
  ctx.finish(e != nullptr ? cuGraphExecMemsetNodeSetParams(e->exec, node, &p, g->gpu->context())
                          : cuGraphMemsetNodeSetParams(node, &p));
}

// A node of an executable graph (by its graph's node), for cuGraphNodeGet/SetEnabled.
CUgraphNode execNode(CallContext& ctx, wire::ExecNodeRef::Reader target, session::GraphExecState*& e) {
  session::GraphState* g = nullptr;
  if (!execOfNodesGraph(ctx, target.getExec(), target.getNode(), e)) return nullptr;
  return nodeOfType(ctx, target.getNode(), std::nullopt, g);
}

void getNodeEnabled(CallContext& ctx, wire::ExecNodeRef::Reader args) {
  session::GraphExecState* e = nullptr;
  CUgraphNode node = execNode(ctx, args, e);
  if (node == nullptr) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  unsigned enabled = 0;
  if (CUresult r = cuGraphNodeGetEnabled(e->exec, node, &enabled); r != CUDA_SUCCESS) return ctx.finish(r);
  ctx.finish(CUDA_SUCCESS, [enabled](wire::Reply::Builder reply) { reply.setValue(enabled); });
}

void setNodeEnabled(CallContext& ctx, wire::NodeSetEnabled::Reader args) {
  session::GraphExecState* e = nullptr;
  CUgraphNode node = execNode(ctx, args.getTarget(), e);
  if (node == nullptr) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  ctx.finish(cuGraphNodeSetEnabled(e->exec, node, args.getEnabled() ? 1 : 0));
}

// The id of the driver's `node` in `g` (0: none, or a node tallyd never listed).
uint32_t idOf(session::GraphTable& graphs, session::GraphState* g, CUgraphNode node) {
  if (g == nullptr || node == nullptr || graphs.listNodes(*g) != CUDA_SUCCESS) return 0;
  auto at = std::find(g->nodes.begin(), g->nodes.end(), node);
  return at == g->nodes.end() ? 0 : static_cast<uint32_t>(at - g->nodes.begin()) + 1;
}

void updateExec(CallContext& ctx, wire::GraphExecUpdate::Reader args) {
  session::GraphTable& graphs = ctx.tenant().graphs();
  session::GraphExecState* e = graphs.exec(args.getExec());
  session::GraphState* g = graphs.graph(args.getGraph());
  if (e == nullptr || g == nullptr || e->gpu != g->gpu) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  if (!e->hostNodes.empty() || !g->hostNodes.empty()) {
    return ctx.finish(hostNodeRefusal(ctx, "cuGraphExecUpdate with host nodes (not supported)", CUDA_ERROR_NOT_SUPPORTED));
  }
  g->gpu->makeCurrent();
  CUgraphExecUpdateResultInfo info{};
  CUresult r = cuGraphExecUpdate(e->exec, g->graph, &info);
  uint32_t errorNode = idOf(graphs, g, info.errorNode);
  uint32_t errorFromNode = idOf(graphs, graphs.graph(e->graph), info.errorFromNode);
  // The result travels with the driver's status, so the client can fill resultInfo either way.
  ctx.finish(r, [&](wire::Reply::Builder reply) {
    auto u = reply.initGraph().initExecUpdate();
    u.setResult(static_cast<uint32_t>(info.result));
    u.setErrorNode(errorNode);
    u.setErrorFromNode(errorFromNode);
  });
}

}  // namespace

// --- capture conflicts (call_context.h) ----------------------------------------------------------

CUresult captureConflict(CallContext& ctx, CUstream stream) {
  session::Tenant& t = ctx.tenant();
  if (!t.streams().capturing(stream)) return CUDA_SUCCESS;
  t.graphs().invalidateCaptureOf(stream);
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

CUresult legacyStreamConflict(CallContext& ctx, session::StreamState& s) {
  session::Tenant& t = ctx.tenant();
  std::vector<session::StreamState*> capturing = t.streams().capturingBlockingStreams(s.gpu);
  for (session::StreamState* c : capturing) t.graphs().invalidateCaptureOf(c->stream);
  if (capturing.empty()) return CUDA_SUCCESS;
  spdlog::debug("tenant {} ({}): legacy default stream used while {} blocking stream(s) capture", t.id(), t.name(),
                capturing.size());
  return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
}

void handleGraph(CallContext& ctx, wire::Call::Reader call) {
  using W = wire::Call;
  switch (call.which()) {
    case W::STREAM_BEGIN_CAPTURE: return beginCapture(ctx, call.getStreamBeginCapture());
    case W::STREAM_END_CAPTURE: return endCapture(ctx, call.getStreamEndCapture());
    case W::GRAPH_INSTANTIATE: return instantiate(ctx, call.getGraphInstantiate());
    case W::GRAPH_LAUNCH: return launchGraph(ctx, call.getGraphLaunch());
    case W::GRAPH_UPLOAD: return uploadGraph(ctx, call.getGraphUpload());
    case W::GRAPH_DESTROY: return destroyGraph(ctx, call.getGraphDestroy().getGraph());
    case W::GRAPH_EXEC_DESTROY: return destroyExec(ctx, call.getGraphExecDestroy().getExec());
    case W::GRAPH_GET_NODES: return getNodes(ctx, call.getGraphGetNodes().getGraph());
    case W::GRAPH_KERNEL_NODE_GET_PARAMS: return getKernelNodeParams(ctx, call.getGraphKernelNodeGetParams());
    case W::GRAPH_KERNEL_NODE_SET_PARAMS: return setKernelNodeParams(ctx, call.getGraphKernelNodeSetParams());
    case W::GRAPH_CREATE: return createGraph(ctx, call.getGraphCreate());
    case W::GRAPH_ADD_KERNEL_NODE: return addKernelNode(ctx, call.getGraphAddKernelNode());
    case W::GRAPH_ADD_MEMCPY_NODE: return addMemcpyNode(ctx, call.getGraphAddMemcpyNode());
    case W::GRAPH_ADD_DEPENDENCIES: return changeDependencies(ctx, call.getGraphAddDependencies(), false);
    case W::GRAPH_ADD_NODE: return addNode(ctx, call.getGraphAddNode());
    case W::GRAPH_GET_EDGES: return getEdges(ctx, call.getGraphGetEdges().getGraph());
    case W::GRAPH_REMOVE_DEPENDENCIES: return changeDependencies(ctx, call.getGraphRemoveDependencies(), true);
    case W::GRAPH_DESTROY_NODE: return destroyNode(ctx, call.getGraphDestroyNode());
    case W::GRAPH_CLONE: return cloneGraph(ctx, call.getGraphClone());
    case W::GRAPH_MEMSET_NODE_GET_PARAMS: return getMemsetNodeParams(ctx, call.getGraphMemsetNodeGetParams());
    case W::GRAPH_MEMSET_NODE_SET_PARAMS: return setMemsetNodeParams(ctx, call.getGraphMemsetNodeSetParams());
    case W::GRAPH_NODE_GET_ENABLED: return getNodeEnabled(ctx, call.getGraphNodeGetEnabled());
    case W::GRAPH_NODE_SET_ENABLED: return setNodeEnabled(ctx, call.getGraphNodeSetEnabled());
    case W::GRAPH_EXEC_UPDATE: return updateExec(ctx, call.getGraphExecUpdate());
    default: return ctx.finish(CUDA_ERROR_NOT_SUPPORTED);
  }
}

}  // namespace tally::server::api
