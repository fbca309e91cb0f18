// CUDA graphs built by hand, as simpleCudaGraphs and jacobiCudaGraphs build them: a memset node,
// a kernel node, a device-to-device memcpy node, an empty node joining them, an event record
// node and an event wait node, and a child graph node (itself a kernel and a memset), built with
// the runtime API; instantiated, launched 5 times and checked. Then the structure queries
// (cudaGraphGetRootNodes, cudaGraphGetEdges, cudaGraphNodeGetDependencies / DependentNodes),
// cudaGraphRemoveDependencies, cudaGraphDestroyNode, cudaGraphClone + cudaGraphNodeFindInClone
// (the clone launched too), memset node parameters in the executable graph, nodes disabled and
// enabled, cudaGraphExecGetFlags, cudaGraphDebugDotPrint, the same graph shape through the
// driver API (cuGraphAdd*Node), and cudaGraphExecUpdate.
#include <cstdio>
#include <cstring>
#include <unistd.h>
#include <string>
#include <vector>

#include "gpu_test_common.h"

static const int kN = 1 << 14;
static const size_t kBytes = sizeof(int) * kN;

__global__ void add_one(int* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += 1;
}

static std::vector<int> download(const int* d) {
  std::vector<int> h(kN);
  CHECK(cudaMemcpy(h.data(), d, kBytes, cudaMemcpyDeviceToHost));
  return h;
}

static bool all_equal(const std::vector<int>& v, int expected) {
  for (int x : v) {
    if (x != expected) return false;
  }
  return true;
}

static cudaKernelNodeParams add_one_params(void** args) {
  cudaKernelNodeParams p{};
  p.func = reinterpret_cast<void*>(add_one);
  p.gridDim = dim3((kN + 255) / 256);
  p.blockDim = dim3(256);
  p.kernelParams = args;
  return p;
}

static cudaMemsetParams memset_params(int* dst, unsigned value) {
  cudaMemsetParams p{};
  p.dst = dst;
  p.value = value;
  p.elementSize = sizeof(int);
  p.width = kN;
  p.height = 1;
  return p;
}

struct Buffers {
  int *work = nullptr, *copy = nullptr, *child = nullptr;
};

// The child: child = 7, then child += 1 (so 8 after each launch of the parent).
static cudaGraph_t child_graph(Buffers& b) {
  cudaGraph_t child;
  CHECK(cudaGraphCreate(&child, 0));
  cudaGraphNode_t set, kernel;
  cudaMemsetParams m = memset_params(b.child, 7);
  CHECK(cudaGraphAddMemsetNode(&set, child, nullptr, 0, &m));
  int n = kN;
  void* args[] = {&b.child, &n};
  cudaKernelNodeParams k = add_one_params(args);
  CHECK(cudaGraphAddKernelNode(&kernel, child, &set, 1, &k));
  return child;
}

// work = 0 → work += 1 → copy = work; the child alongside; an empty node joins both; the event
// is recorded after the join and waited for at the end.
static void built_graph(Buffers& b, cudaStream_t s) {
  cudaGraph_t graph;
  CHECK(cudaGraphCreate(&graph, 0));
  cudaEvent_t event;
  CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  cudaGraphNode_t set, kernel, copy, child, join, record, wait;
  cudaMemsetParams m = memset_params(b.work, 0);
  CHECK(cudaGraphAddMemsetNode(&set, graph, nullptr, 0, &m));
  int n = kN;
  void* args[] = {&b.work, &n};
  cudaKernelNodeParams k = add_one_params(args);
  CHECK(cudaGraphAddKernelNode(&kernel, graph, &set, 1, &k));
  CHECK(cudaGraphAddMemcpyNode1D(&copy, graph, &kernel, 1, b.copy, b.work, kBytes, cudaMemcpyDeviceToDevice));
  cudaGraph_t embedded = child_graph(b);
  CHECK(cudaGraphAddChildGraphNode(&child, graph, nullptr, 0, embedded));
  CHECK(cudaGraphDestroy(embedded));  // the node holds its own copy
  cudaGraphNode_t both[] = {copy, child};
  CHECK(cudaGraphAddEmptyNode(&join, graph, both, 2));
  CHECK(cudaGraphAddEventRecordNode(&record, graph, &join, 1, event));
  CHECK(cudaGraphAddEventWaitNode(&wait, graph, &record, 1, event));

  // Structure as the driver holds it.
  size_t count = 0;
  CHECK(cudaGraphGetRootNodes(graph, nullptr, &count));
  expect(count == 2, "two root nodes (memset, child graph)");
  std::vector<cudaGraphNode_t> roots(count);
  CHECK(cudaGraphGetRootNodes(graph, roots.data(), &count));
  expect((roots[0] == set && roots[1] == child) || (roots[0] == child && roots[1] == set), "the roots are memset and child");
  CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &count));
  expect(count == 6, "six edges");
  CHECK(cudaGraphNodeGetDependencies(join, nullptr, nullptr, &count));
  expect(count == 2, "the empty node has two dependencies");
  cudaGraphNode_t dependent = nullptr;
  count = 1;
  CHECK(cudaGraphNodeGetDependentNodes(kernel, &dependent, nullptr, &count));
  expect(count == 1 && dependent == copy, "the copy depends on the kernel");
  cudaGraphNodeType type;
  CHECK(cudaGraphNodeGetType(child, &type));
  expect(type == cudaGraphNodeTypeGraph, "a child graph node");

  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  unsigned long long flags = 0;
  CHECK(cudaGraphExecGetFlags(exec, &flags));
  expect(flags == cudaGraphInstantiateFlagAutoFreeOnLaunch, "cudaGraphExecGetFlags: as instantiated");
  for (int i = 0; i < 5; ++i) CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  expect(all_equal(download(b.work), 1), "work: set to 0, then 1 added (each launch)");
  expect(all_equal(download(b.copy), 1), "copy: the work after the kernel");
  expect(all_equal(download(b.child), 8), "child graph: 7, then 1 added");

  // The executable graph's memset now sets 10, and its kernel node is disabled then enabled.
  cudaMemsetParams current{};
  CHECK(cudaGraphMemsetNodeGetParams(set, &current));
  expect(current.dst == b.work && current.value == 0 && current.width == kN, "cudaGraphMemsetNodeGetParams");
  cudaMemsetParams ten = memset_params(b.work, 10);
  CHECK(cudaGraphExecMemsetNodeSetParams(exec, set, &ten));
  CHECK(cudaGraphNodeSetEnabled(exec, kernel, 0));
  unsigned enabled = 1;
  CHECK(cudaGraphNodeGetEnabled(exec, kernel, &enabled));
  expect(enabled == 0, "cudaGraphNodeGetEnabled: disabled");
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  expect(all_equal(download(b.work), 10), "exec memset set to 10, kernel disabled");
  CHECK(cudaGraphNodeSetEnabled(exec, kernel, 1));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  expect(all_equal(download(b.work), 11), "kernel enabled again");

  // A clone finds the original's nodes; removing its kernel's edge and the kernel leaves work at 0.
  cudaGraph_t clone;
  CHECK(cudaGraphClone(&clone, graph));
  cudaGraphNode_t clonedKernel = nullptr, clonedSet = nullptr, clonedCopy = nullptr;
  CHECK(cudaGraphNodeFindInClone(&clonedKernel, kernel, clone));
  CHECK(cudaGraphNodeFindInClone(&clonedSet, set, clone));
  CHECK(cudaGraphNodeFindInClone(&clonedCopy, copy, clone));
  expect(clonedKernel != kernel, "the clone's node is its own");
  // The original graph is no clone (cudaGraphNodeFindInClone(pNode, originalNode, clonedGraph)).
  // A failing call may write its output (natively it leaves it unusable), so it gets its own.
  cudaGraphNode_t notInAClone = nullptr;
  EXPECT_ERR(cudaGraphNodeFindInClone(&notInAClone, kernel, graph), cudaErrorInvalidValue);
  // Every node named must belong to the graph, and the edge must exist.
  EXPECT_ERR(cudaGraphRemoveDependencies(clone, &set, &clonedKernel, nullptr, 1), cudaErrorInvalidValue);
  CHECK(cudaGraphRemoveDependencies(clone, &clonedSet, &clonedKernel, nullptr, 1));
  CHECK(cudaGraphNodeGetDependencies(clonedKernel, nullptr, nullptr, &count));
  expect(count == 0, "the removed edge is gone");
  EXPECT_ERR(cudaGraphRemoveDependencies(clone, &clonedSet, &clonedKernel, nullptr, 1), cudaErrorInvalidValue);
  CHECK(cudaGraphDestroyNode(clonedKernel));
  CHECK(cudaGraphAddDependencies(clone, &clonedSet, &clonedCopy, nullptr, 1));
  // Per process: the suite runs this program twice at once as an HP+BE pair.
  const std::string dotPath = "/tmp/tally_graph_explicit." + std::to_string(getpid()) + ".dot";
  CHECK(cudaGraphDebugDotPrint(clone, dotPath.c_str(), 0));
  FILE* dot = std::fopen(dotPath.c_str(), "r");
  expect(dot != nullptr, "cudaGraphDebugDotPrint wrote its file");
  if (dot != nullptr) {
    char head[16] = {};
    expect(std::fread(head, 1, 7, dot) == 7 && std::strncmp(head, "digraph", 7) == 0, "a DOT digraph");
    std::fclose(dot);
    std::remove(dotPath.c_str());
  }
  cudaGraphExec_t cloneExec;
  CHECK(cudaGraphInstantiate(&cloneExec, clone, 0));
  CHECK(cudaGraphLaunch(cloneExec, s));
  CHECK(cudaStreamSynchronize(s));
  expect(all_equal(download(b.work), 0), "clone without the kernel: work stays 0");
  expect(all_equal(download(b.copy), 0), "clone: the copy follows the memset");

  CHECK(cudaGraphExecDestroy(cloneExec));
  CHECK(cudaGraphDestroy(clone));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaEventDestroy(event));
}

// The driver API's node functions: memset, empty, event record, child graph.
static void driver_graph(Buffers& b, cudaStream_t s) {
  auto cuGraphCreate_ = driver_fn<CUresult (*)(CUgraph*, unsigned)>("cuGraphCreate");
  auto cuGraphAddMemsetNode_ = driver_fn<CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t,
                                                      const CUDA_MEMSET_NODE_PARAMS*, CUcontext)>("cuGraphAddMemsetNode");
  auto cuGraphAddEmptyNode_ =
      driver_fn<CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t)>("cuGraphAddEmptyNode");
  auto cuGraphAddChildGraphNode_ =
      driver_fn<CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraph)>("cuGraphAddChildGraphNode");
  auto cuGraphGetRootNodes_ = driver_fn<CUresult (*)(CUgraph, CUgraphNode*, size_t*)>("cuGraphGetRootNodes");
  auto cuGraphDestroy_ = driver_fn<CUresult (*)(CUgraph)>("cuGraphDestroy");
  auto cuCtxGetCurrent_ = driver_fn<CUresult (*)(CUcontext*)>("cuCtxGetCurrent");
  CUcontext context = nullptr;
  CU_CHECK(cuCtxGetCurrent_(&context));
  CUgraph child, graph;
  CU_CHECK(cuGraphCreate_(&child, 0));
  CU_CHECK(cuGraphCreate_(&graph, 0));
  CUDA_MEMSET_NODE_PARAMS m{};
  m.dst = reinterpret_cast<CUdeviceptr>(b.copy);
  m.value = 42;
  m.elementSize = 4;
  m.width = kN;
  m.height = 1;
  CUgraphNode set, empty, embedded;
  CU_CHECK(cuGraphAddMemsetNode_(&set, child, nullptr, 0, &m, context));
  CU_CHECK(cuGraphAddEmptyNode_(&empty, graph, nullptr, 0));
  CU_CHECK(cuGraphAddChildGraphNode_(&embedded, graph, &empty, 1, child));
  size_t roots = 0;
  CU_CHECK(cuGraphGetRootNodes_(graph, nullptr, &roots));
  expect(roots == 1, "driver: one root node");
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, reinterpret_cast<cudaGraph_t>(graph), 0));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  expect(all_equal(download(b.copy), 42), "driver: the child's memset ran");
  CHECK(cudaGraphExecDestroy(exec));
  CU_CHECK(cuGraphDestroy_(graph));
  CU_CHECK(cuGraphDestroy_(child));
}

// cudaGraphExecUpdate: an exec takes the parameters of a graph of the same shape (the memset
// value); a graph of another shape is refused with the reason and the node it failed on.
static void exec_update(Buffers& b, cudaStream_t s) {
  auto one_memset = [&](unsigned value, cudaGraph_t& g, cudaGraphNode_t& node) {
    CHECK(cudaGraphCreate(&g, 0));
    cudaMemsetParams p = memset_params(b.work, value);
    CHECK(cudaGraphAddMemsetNode(&node, g, nullptr, 0, &p));
  };
  cudaGraph_t first, second, other;
  cudaGraphNode_t firstNode, secondNode, otherNode, extra;
  one_memset(3, first, firstNode);
  one_memset(9, second, secondNode);
  one_memset(4, other, otherNode);
  CHECK(cudaGraphAddEmptyNode(&extra, other, &otherNode, 1));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, first, 0));
  cudaGraphExecUpdateResultInfo info{};
  CHECK(cudaGraphExecUpdate(exec, second, &info));
  std::printf("update to the same shape: result %d\n", static_cast<int>(info.result));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  expect(all_equal(download(b.work), 9), "the updated exec sets the new value");
  EXPECT_ERR(cudaGraphExecUpdate(exec, other, &info), cudaErrorGraphExecUpdateFailure);
  std::printf("update to another shape: result %d\n", static_cast<int>(info.result));
  expect(info.result == cudaGraphExecUpdateErrorTopologyChanged, "the reason is the changed topology");
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  expect(all_equal(download(b.work), 9), "a refused update changes nothing");
  CHECK(cudaGraphExecDestroy(exec));
  for (cudaGraph_t g : {first, second, other}) CHECK(cudaGraphDestroy(g));
}

int main() {
  Buffers b;
  for (int** p : {&b.work, &b.copy, &b.child}) CHECK(cudaMalloc(p, kBytes));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  built_graph(b, s);
  driver_graph(b, s);
  exec_update(b, s);
  CHECK(cudaStreamDestroy(s));
  for (int* p : {b.work, b.copy, b.child}) CHECK(cudaFree(p));
  return finish("graph_explicit");
}
