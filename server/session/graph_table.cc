#include "server/session/graph_table.h"

#include "server/gpu/cuda_check.h"
#include "server/gpu/gpu.h"
#include "server/session/stream_table.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace tally::server::session {

GraphTable::GraphTable(StreamTable& streams, uint64_t maxGraphs, std::string tenant)
    : streams_(streams),
      tenant_(tenant),
      graphLimit_("graphs", maxGraphs, tenant),
      execLimit_("executable graphs", maxGraphs, tenant) {}

// --- captures ----------------------------------------------------------------------------

CaptureState* GraphTable::capture(uint64_t stream) {
  auto it = captures_.find(stream);
  return it == captures_.end() ? nullptr : &it->second;
}

void GraphTable::addCapture(uint64_t stream, CaptureState c) {
  if (captures_.insert_or_assign(stream, c).second) streams_.noteCaptureBegun();
}

std::optional<CaptureState> GraphTable::takeCapture(uint64_t stream) {
  auto it = captures_.find(stream);
  if (it == captures_.end()) return std::nullopt;
  CaptureState taken = it->second;
  captures_.erase(it);
  streams_.noteCaptureEnded();
  return taken;
}

bool GraphTable::invalidateCapture(uint64_t captureId) {
  for (auto& [stream, c] : captures_) {
    if (c.captureId == captureId) {
      c.invalidated = true;
      return true;
    }
  }
  return false;
}

bool GraphTable::invalidateCaptureOf(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  if (cuStreamGetCaptureInfo(stream, &status, &id, nullptr, nullptr, nullptr, nullptr) != CUDA_SUCCESS ||
      status == CU_STREAM_CAPTURE_STATUS_NONE) {
    return false;
  }
  return invalidateCapture(id);
}

// --- graphs ------------------------------------------------------------------------------

CUresult GraphTable::admitGraph(uint64_t id) {
  if (id == 0 || graphs_.count(id) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!graphLimit_.allowsOneMore(graphs_.size())) return CUDA_ERROR_OUT_OF_MEMORY;
  return CUDA_SUCCESS;
}

void GraphTable::insertGraph(uint64_t id, GraphState g) { graphs_.insert_or_assign(id, std::move(g)); }

GraphState* GraphTable::graph(uint64_t id) {
  auto it = graphs_.find(id);
  return it == graphs_.end() ? nullptr : &it->second;
}

std::optional<GraphState> GraphTable::takeGraph(uint64_t id) {
  auto it = graphs_.find(id);
  if (it == graphs_.end()) return std::nullopt;
  GraphState taken = std::move(it->second);
  graphs_.erase(it);
  return taken;
}

CUresult GraphTable::listNodes(GraphState& g) {
  if (g.nodesListed) return CUDA_SUCCESS;
  size_t count = 0;
  if (CUresult r = cuGraphGetNodes(g.graph, nullptr, &count); r != CUDA_SUCCESS) return r;
  std::vector<CUgraphNode> nodes(count);
  if (count > 0) {
    if (CUresult r = cuGraphGetNodes(g.graph, nodes.data(), &count); r != CUDA_SUCCESS) return r;
    nodes.resize(count);
  }
  // Nodes added before the listing (explicit construction of a captured graph) come after it.
  for (CUgraphNode n : g.nodes) {
    if (std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
  }
  g.nodes = std::move(nodes);
  g.nodesListed = true;
  return CUDA_SUCCESS;
}

std::optional<CUdeviceptr> GraphTable::placeholderWords(gpu::Gpu* g) {
  auto it = placeholderWords_.find(g);
  if (it != placeholderWords_.end()) return it->second;
  g->makeCurrent();
  CUdeviceptr words = 0;
  if (cuMemAlloc(&words, 2 * sizeof(uint32_t)) != CUDA_SUCCESS) return std::nullopt;
  if (cuMemsetD32(words, 0, 2) != CUDA_SUCCESS) {
    cuMemFree(words);
    return std::nullopt;
  }
  placeholderWords_.emplace(g, words);
  return words;
}

CUgraphNode GraphTable::node(GraphState& g, uint32_t id) {
  if (id == 0 || listNodes(g) != CUDA_SUCCESS || id > g.nodes.size()) return nullptr;
  return g.nodes[id - 1];
}

// --- executable graphs -------------------------------------------------------------------

CUresult GraphTable::admitExec(uint64_t id) {
  if (id == 0 || execs_.count(id) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!execLimit_.allowsOneMore(execs_.size())) return CUDA_ERROR_OUT_OF_MEMORY;
  return CUDA_SUCCESS;
}

void GraphTable::insertExec(uint64_t id, GraphExecState e) { execs_.insert_or_assign(id, e); }

GraphExecState* GraphTable::exec(uint64_t id) {
  auto it = execs_.find(id);
  return it == execs_.end() ? nullptr : &it->second;
}

std::optional<GraphExecState> GraphTable::takeExec(uint64_t id) {
  auto it = execs_.find(id);
  if (it == execs_.end()) return std::nullopt;
  GraphExecState taken = it->second;
  execs_.erase(it);
  auto retired = retired_.find(taken.graph);
  if (retired != retired_.end() && !hostNodesInUse(taken.graph)) {
    // Its executable graphs are destroyed first (Tenant::release, destroyExec), so none needs it.
    retired->second.gpu->makeCurrent();
    cuGraphDestroy(retired->second.graph);
    retired_.erase(retired);
  }
  return taken;
}

bool GraphTable::hostNodesInUse(uint64_t graph) const {
  return std::any_of(execs_.begin(), execs_.end(),
                     [graph](const auto& e) { return e.second.graph == graph && !e.second.hostNodes.empty(); });
}

void GraphTable::retireGraph(uint64_t id, GraphState g) { retired_.insert_or_assign(id, std::move(g)); }

// --- end of the tenancy --------------------------------------------------------------------

void GraphTable::endCaptures() {
  for (auto& [stream, c] : captures_) {
    c.gpu->makeCurrent();
    CUgraph graph = nullptr;
    CUresult r = cuStreamEndCapture(c.stream, &graph);
    if (graph != nullptr) cuGraphDestroy(graph);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) {
      spdlog::warn("{}: ending the capture on stream {} at release failed: {}", tenant_, stream, gpu::describe(r));
    }
    streams_.noteCaptureEnded();
  }
  captures_.clear();
}

void GraphTable::destroyAll() {
  for (auto& [id, e] : execs_) {
    e.gpu->makeCurrent();
    if (CUresult r = cuGraphExecDestroy(e.exec); r != CUDA_SUCCESS) {
      spdlog::warn("{}: destroying executable graph {} at release failed: {}", tenant_, id, gpu::describe(r));
    }
  }
  execs_.clear();
  for (auto& [id, g] : graphs_) {
    g.gpu->makeCurrent();
    if (CUresult r = cuGraphDestroy(g.graph); r != CUDA_SUCCESS) {
      spdlog::warn("{}: destroying graph {} at release failed: {}", tenant_, id, gpu::describe(r));
    }
  }
  graphs_.clear();
  for (auto& [id, g] : retired_) {
    g.gpu->makeCurrent();
    cuGraphDestroy(g.graph);
  }
  retired_.clear();
  for (auto& [g, words] : placeholderWords_) {
    g->makeCurrent();
    cuMemFree(words);
  }
  placeholderWords_.clear();
}

}  // namespace tally::server::session
