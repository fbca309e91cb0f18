// The generic node API of CUDA 12.2+ (cudaGraphAddNode, cuGraphAddNode): one call for every node
// kind, given as a tagged union. Each kind Tally builds by hand goes through its own add function
// (graph.cc, graph_nodes.cc), so it is checked and sent exactly as when the application calls
// that function; the other kinds (external semaphores, memory allocation and free, conditional,
// memory operations) and edges with data other than the default answer NotSupported, logged.
#include "client/api/graph_handles.h"

#include <cstring>

using namespace tally::client;

namespace {

// Programmatic edges are not forwarded (graph_nodes.cc): only all-default edge data is accepted.
template <typename EdgeData>
bool defaultEdges(const EdgeData* edges, size_t count) {
  if (edges == nullptr) return true;
  static const EdgeData kDefault{};
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(&edges[i], &kDefault, sizeof(EdgeData)) != 0) return false;
  }
  return true;
}

void logUnsupported(const char* api, const char* what, int type) {
  spdlog::warn("tally: {} of node type {}: {} is not supported; returning NotSupported", api, type, what);
}

cudaError_t addRuntimeNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps, size_t count,
                           cudaGraphNodeParams& p) {
  switch (p.type) {
    case cudaGraphNodeTypeKernel: {
      cudaKernelNodeParams k{p.kernel.func, p.kernel.gridDim, p.kernel.blockDim, p.kernel.sharedMemBytes,
                             p.kernel.kernelParams, p.kernel.extra};
      return cudaGraphAddKernelNode(node, graph, deps, count, &k);
    }
    case cudaGraphNodeTypeMemcpy:
      return cudaGraphAddMemcpyNode(node, graph, deps, count, &p.memcpy.copyParams);
    case cudaGraphNodeTypeMemset: {
      cudaMemsetParams m{p.memset.dst, p.memset.pitch, p.memset.value, p.memset.elementSize, p.memset.width,
                         p.memset.height};
      return cudaGraphAddMemsetNode(node, graph, deps, count, &m);
    }
    case cudaGraphNodeTypeHost: {
      cudaHostNodeParams h{p.host.fn, p.host.userData};
      return cudaGraphAddHostNode(node, graph, deps, count, &h);
    }
    case cudaGraphNodeTypeGraph:
      if (p.graph.ownership != cudaGraphChildGraphOwnershipClone) {
        logUnsupported("cudaGraphAddNode", "moving the child graph into the node", p.type);
        return cudaErrorNotSupported;
      }
      return cudaGraphAddChildGraphNode(node, graph, deps, count, p.graph.graph);
    case cudaGraphNodeTypeWaitEvent:
      return cudaGraphAddEventWaitNode(node, graph, deps, count, p.eventWait.event);
    case cudaGraphNodeTypeEventRecord:
      return cudaGraphAddEventRecordNode(node, graph, deps, count, p.eventRecord.event);
    case cudaGraphNodeTypeEmpty:
      return cudaGraphAddEmptyNode(node, graph, deps, count);
    default:
      logUnsupported("cudaGraphAddNode", "this node type", p.type);
      return cudaErrorNotSupported;
  }
}

CUresult addDriverNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t count, CUgraphNodeParams& p) {
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      CUDA_KERNEL_NODE_PARAMS k{};
      k.func = p.kernel.func;
      k.gridDimX = p.kernel.gridDimX;
      k.gridDimY = p.kernel.gridDimY;
      k.gridDimZ = p.kernel.gridDimZ;
      k.blockDimX = p.kernel.blockDimX;
      k.blockDimY = p.kernel.blockDimY;
      k.blockDimZ = p.kernel.blockDimZ;
      k.sharedMemBytes = p.kernel.sharedMemBytes;
      k.kernelParams = p.kernel.kernelParams;
      k.extra = p.kernel.extra;
      k.kern = p.kernel.kern;
      k.ctx = p.kernel.ctx;
      return cuGraphAddKernelNode(node, graph, deps, count, &k);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return cuGraphAddMemcpyNode(node, graph, deps, count, &p.memcpy.copyParams, p.memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      CUDA_MEMSET_NODE_PARAMS m{p.memset.dst, p.memset.pitch, p.memset.value, p.memset.elementSize, p.memset.width,
                                p.memset.height};
      return cuGraphAddMemsetNode(node, graph, deps, count, &m, p.memset.ctx);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
      CUDA_HOST_NODE_PARAMS h{p.host.fn, p.host.userData};
      return cuGraphAddHostNode(node, graph, deps, count, &h);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
      if (p.graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE) {
        logUnsupported("cuGraphAddNode", "moving the child graph into the node", p.type);
        return CUDA_ERROR_NOT_SUPPORTED;
      }
      return cuGraphAddChildGraphNode(node, graph, deps, count, p.graph.graph);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return cuGraphAddEventWaitNode(node, graph, deps, count, p.eventWait.event);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return cuGraphAddEventRecordNode(node, graph, deps, count, p.eventRecord.event);
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return cuGraphAddEmptyNode(node, graph, deps, count);
    default:
      logUnsupported("cuGraphAddNode", "this node type", p.type);
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

}  // namespace

TALLY_API cudaError_t cudaGraphAddNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* dependencies,
                                      const cudaGraphEdgeData* edges, size_t count, cudaGraphNodeParams* params) {
  if (params == nullptr) return finishRuntime(cudaErrorInvalidValue);
  if (!defaultEdges(edges, count)) {
    logUnsupported("cudaGraphAddNode", "edge data other than the default", params->type);
    return finishRuntime(cudaErrorNotSupported);
  }
  return addRuntimeNode(node, graph, dependencies, count, *params);
}

TALLY_API CUresult cuGraphAddNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies,
                                  const CUgraphEdgeData* edges, size_t count, CUgraphNodeParams* params) {  // _v2
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!defaultEdges(edges, count)) {
    logUnsupported("cuGraphAddNode", "edge data other than the default", params->type);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return addDriverNode(node, graph, dependencies, count, *params);
}

// CUDA 12.2's generation, without edge data (cuda.h renames cuGraphAddNode to its _v2).
#undef cuGraphAddNode
TALLY_API CUresult cuGraphAddNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                                  CUgraphNodeParams* params) {
  return cuGraphAddNode_v2(node, graph, dependencies, nullptr, count, params);
}
