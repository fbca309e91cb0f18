// Host nodes in CUDA graphs built by hand: a host function runs between GPU work at every launch,
// after what precedes it and before what follows (checked through managed memory, which both
// sides see: a kernel writes a word the host node reads, the host node writes a word the next
// kernel reads). Then node parameters (get/set in the graph, set in an executable graph), the
// node type, a clone, two executable graphs of one graph launched on two streams, many
// instantiate/launch/destroy cycles, the generic cudaGraphAddNode, and the driver API
// (cuGraphAddHostNode). Through Tally only over a Unix socket (the words the node and the client
// share are memory mapped by both).
#include <cstdio>
#include <vector>

#include "gpu_test_common.h"

struct Shared {
  int fromKernel;  // written by `produce`, read by the host node
  int fromHost;    // written by the host node, read by `consume`
  int consumed;    // what `consume` saw, summed over launches
};

__global__ void produce(Shared* s, int value) { s->fromKernel = value; }
__global__ void consume(Shared* s) { s->consumed += s->fromHost; }

struct HostLog {
  std::vector<int> seen;  // fromKernel as each host node run saw it
  Shared* shared = nullptr;
  int tag = 0;            // added to what the host node writes, to tell parameter sets apart
};

static void CUDART_CB host_step(void* data) {
  auto* log = static_cast<HostLog*>(data);
  log->seen.push_back(log->shared->fromKernel);
  log->shared->fromHost = log->shared->fromKernel * 10 + log->tag;
}

static void CUDART_CB count_calls(void* data) { ++*static_cast<int*>(data); }

// produce(value) -> host_step -> consume
struct Chain {
  cudaGraph_t graph = nullptr;
  cudaGraphNode_t produceNode = nullptr, hostNode = nullptr, consumeNode = nullptr;
  int value = 0;
  Shared* shared = nullptr;
  void* produceArgs[2] = {};
  void* consumeArgs[1] = {};
};

static void build_chain(Chain& c, Shared* shared, int value, HostLog* log) {
  c.shared = shared;
  c.value = value;
  CHECK(cudaGraphCreate(&c.graph, 0));
  c.produceArgs[0] = &c.shared;
  c.produceArgs[1] = &c.value;
  cudaKernelNodeParams kp{};
  kp.func = reinterpret_cast<void*>(produce);
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(1);
  kp.kernelParams = c.produceArgs;
  CHECK(cudaGraphAddKernelNode(&c.produceNode, c.graph, nullptr, 0, &kp));
  cudaHostNodeParams hp{host_step, log};
  CHECK(cudaGraphAddHostNode(&c.hostNode, c.graph, &c.produceNode, 1, &hp));
  c.consumeArgs[0] = &c.shared;
  kp.func = reinterpret_cast<void*>(consume);
  kp.kernelParams = c.consumeArgs;
  CHECK(cudaGraphAddKernelNode(&c.consumeNode, c.graph, &c.hostNode, 1, &kp));
}

static bool all_equal(const std::vector<int>& v, int expected, size_t count) {
  if (v.size() != count) return false;
  for (int x : v) {
    if (x != expected) return false;
  }
  return true;
}

static void ordering(Shared* shared) {
  HostLog log;
  log.shared = shared;
  Chain c;
  build_chain(c, shared, 7, &log);
  cudaGraphNodeType type;
  CHECK(cudaGraphNodeGetType(c.hostNode, &type));
  expect(type == cudaGraphNodeTypeHost, "the node is a host node");
  cudaHostNodeParams got{};
  CHECK(cudaGraphHostNodeGetParams(c.hostNode, &got));
  expect(got.fn == host_step && got.userData == &log, "its parameters read back");

  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, c.graph, 0));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  shared->consumed = 0;
  for (int i = 0; i < 5; ++i) CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  expect(all_equal(log.seen, 7, 5), "5 launches: the host node ran 5 times, after produce");
  expect(shared->consumed == 5 * 70, "consume ran after the host node each time");

  // Set in the executable graph: later launches of it only.
  HostLog other;
  other.shared = shared;
  other.tag = 1;
  cudaHostNodeParams otherParams{host_step, &other};
  CHECK(cudaGraphExecHostNodeSetParams(exec, c.hostNode, &otherParams));
  shared->consumed = 0;
  CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  expect(all_equal(other.seen, 7, 1) && log.seen.size() == 5, "exec set params: the new function's data");
  expect(shared->consumed == 71, "and consume saw what it wrote");
  CHECK(cudaGraphHostNodeGetParams(c.hostNode, &got));
  expect(got.userData == &log, "the graph keeps its own parameters");

  // Set in the graph: the next instantiation runs them, the existing exec does not.
  HostLog third;
  third.shared = shared;
  third.tag = 2;
  cudaHostNodeParams thirdParams{host_step, &third};
  CHECK(cudaGraphHostNodeSetParams(c.hostNode, &thirdParams));
  cudaGraphExec_t exec2;
  CHECK(cudaGraphInstantiate(&exec2, c.graph, 0));
  CHECK(cudaGraphLaunch(exec2, stream));
  CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  expect(third.seen.size() == 1 && other.seen.size() == 2, "graph set params: new exec only");

  // A clone keeps the host node and its parameters.
  cudaGraph_t clone;
  CHECK(cudaGraphClone(&clone, c.graph));
  cudaGraphNode_t clonedHost;
  CHECK(cudaGraphNodeFindInClone(&clonedHost, c.hostNode, clone));
  CHECK(cudaGraphHostNodeGetParams(clonedHost, &got));
  expect(got.userData == &third, "the clone's host node has the graph's parameters");
  cudaGraphExec_t cloneExec;
  CHECK(cudaGraphInstantiate(&cloneExec, clone, 0));
  CHECK(cudaGraphLaunch(cloneExec, stream));
  CHECK(cudaStreamSynchronize(stream));
  expect(third.seen.size() == 2, "the clone's launch ran it");

  EXPECT_ERR(cudaGraphHostNodeGetParams(c.produceNode, &got), cudaErrorInvalidValue);
  cudaHostNodeParams noFunction{nullptr, nullptr};
  cudaGraphNode_t unused;
  EXPECT_ERR(cudaGraphAddHostNode(&unused, c.graph, nullptr, 0, &noFunction), cudaErrorInvalidValue);

  CHECK(cudaGraphExecDestroy(cloneExec));
  CHECK(cudaGraphExecDestroy(exec2));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(clone));
  CHECK(cudaGraphDestroy(c.graph));
  CHECK(cudaStreamDestroy(stream));
}

// Two executable graphs of one graph, each launched on its own stream, 20 times each, after the
// graph itself was destroyed.
static void two_execs() {
  int calls = 0;
  cudaGraph_t graph;
  CHECK(cudaGraphCreate(&graph, 0));
  cudaGraphNode_t node;
  cudaHostNodeParams hp{count_calls, &calls};
  CHECK(cudaGraphAddHostNode(&node, graph, nullptr, 0, &hp));
  cudaGraphExec_t a, b;
  CHECK(cudaGraphInstantiate(&a, graph, 0));
  CHECK(cudaGraphInstantiate(&b, graph, 0));
  CHECK(cudaGraphDestroy(graph));  // the executable graphs live on without it
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  for (int i = 0; i < 20; ++i) {
    CHECK(cudaGraphLaunch(a, s1));
    CHECK(cudaGraphLaunch(b, s2));
  }
  CHECK(cudaStreamSynchronize(s1));
  CHECK(cudaStreamSynchronize(s2));
  std::printf("two execs on two streams: %d host node runs\n", calls);
  expect(calls == 40, "every launch of both ran the host node");
  CHECK(cudaGraphExecDestroy(a));
  CHECK(cudaGraphExecDestroy(b));
  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaStreamDestroy(s2));
}

// Executable graphs come and go (their word pairs are reused).
static void many_execs() {
  int calls = 0;
  cudaGraph_t graph;
  CHECK(cudaGraphCreate(&graph, 0));
  cudaGraphNode_t first, second;
  cudaHostNodeParams hp{count_calls, &calls};
  CHECK(cudaGraphAddHostNode(&first, graph, nullptr, 0, &hp));
  CHECK(cudaGraphAddHostNode(&second, graph, &first, 1, &hp));
  for (int i = 0; i < 300; ++i) {
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphLaunch(exec, 0));
    CHECK(cudaGraphExecDestroy(exec));  // natively allowed while the launch may still run
  }
  CHECK(cudaDeviceSynchronize());
  std::printf("300 instantiate/launch/destroy cycles: %d host node runs\n", calls);
  expect(calls == 600, "every cycle ran both host nodes");
  CHECK(cudaGraphDestroy(graph));
}

// The same chain through the generic node API (cudaGraphAddNode).
static void generic_add(Shared* shared) {
  HostLog log;
  log.shared = shared;
  int value = 5;
  void* produceArgs[2] = {&shared, &value};
  void* consumeArgs[1] = {&shared};
  cudaGraph_t graph;
  CHECK(cudaGraphCreate(&graph, 0));
  cudaGraphNodeParams p{};
  p.type = cudaGraphNodeTypeKernel;
  p.kernel.func = reinterpret_cast<void*>(produce);
  p.kernel.gridDim = dim3(1);
  p.kernel.blockDim = dim3(1);
  p.kernel.kernelParams = produceArgs;
  cudaGraphNode_t produceNode, hostNode, consumeNode;
  CHECK(cudaGraphAddNode(&produceNode, graph, nullptr, nullptr, 0, &p));
  cudaGraphNodeParams h{};
  h.type = cudaGraphNodeTypeHost;
  h.host.fn = host_step;
  h.host.userData = &log;
  CHECK(cudaGraphAddNode(&hostNode, graph, &produceNode, nullptr, 1, &h));
  p.kernel.func = reinterpret_cast<void*>(consume);
  p.kernel.kernelParams = consumeArgs;
  CHECK(cudaGraphAddNode(&consumeNode, graph, &hostNode, nullptr, 1, &p));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  shared->consumed = 0;
  CHECK(cudaGraphLaunch(exec, 0));
  CHECK(cudaGraphLaunch(exec, 0));
  CHECK(cudaDeviceSynchronize());
  expect(all_equal(log.seen, 5, 2) && shared->consumed == 100, "cudaGraphAddNode: kernel, host, kernel in order");
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
}

static void driver_api() {
  int calls = 0;
  CUgraph graph;
  CU_CHECK(cuGraphCreate(&graph, 0));
  CUgraphNode node;
  CUDA_HOST_NODE_PARAMS hp{};
  hp.fn = count_calls;
  hp.userData = &calls;
  CU_CHECK(cuGraphAddHostNode(&node, graph, nullptr, 0, &hp));
  CUDA_HOST_NODE_PARAMS got{};
  CU_CHECK(cuGraphHostNodeGetParams(node, &got));
  expect(got.fn == count_calls && got.userData == &calls, "driver: parameters read back");
  CUgraphExec exec;
  CU_CHECK(cuGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) CU_CHECK(cuGraphLaunch(exec, nullptr));
  CU_CHECK(cuStreamSynchronize(nullptr));
  expect(calls == 3, "driver: 3 launches, 3 runs");
  CU_CHECK(cuGraphExecDestroy(exec));
  CU_CHECK(cuGraphDestroy(graph));
}

int main() {
  CHECK(cudaSetDevice(0));
  Shared* shared = nullptr;
  CHECK(cudaMallocManaged(&shared, sizeof(Shared)));
  *shared = Shared{};
  ordering(shared);
  two_execs();
  many_execs();
  generic_add(shared);
  driver_api();
  CHECK(cudaFree(shared));
  return finish("graph_host_nodes");
}
