// CUDA graphs by stream capture: two kernels, a device-to-device cudaMemcpyAsync and a
// cudaMemsetAsync captured on a stream, instantiated, uploaded and launched 10 times, then on a
// second stream; cudaStreamIsCapturing / cudaStreamGetCaptureInfo during capture; the native
// error of a sync of the capturing stream (the capture is then invalidated) and of cudaMalloc in
// a global-mode capture; cudaMalloc under a relaxed thread mode (as PyTorch's allocator does);
// fork and join of a capture through events; node queries; a kernel node's parameters changed
// in the executable graph; a graph built node by node.
#include <vector>

#include "gpu_test_common.h"

__global__ void scale(const int* a, int* b, int n, int mul) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = a[i] * mul + 1;
}

__global__ void accumulate(int* acc, const int* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) acc[i] += c[i];
}

__global__ void bump(int* counter) {
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(counter, 1);
}

static const char* status_name(cudaStreamCaptureStatus s) {
  switch (s) {
    case cudaStreamCaptureStatusNone: return "None";
    case cudaStreamCaptureStatusActive: return "Active";
    case cudaStreamCaptureStatusInvalidated: return "Invalidated";
  }
  return "unknown";
}

static cudaStreamCaptureStatus capture_status(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CHECK(cudaStreamIsCapturing(s, &status));
  return status;
}

// Prints what a call returned, without asserting it: the native run is the reference.
#define REPORT(call)                                                              \
  do {                                                                            \
    cudaError_t report_err_ = (call);                                             \
    (void)cudaGetLastError();                                                     \
    std::printf("%s -> %s\n", #call, cudaGetErrorName(report_err_));              \
  } while (0)

static const int kN = 1 << 16;
static const size_t kBytes = sizeof(int) * kN;

struct Buffers {
  int *a = nullptr, *b = nullptr, *c = nullptr, *acc = nullptr;
  std::vector<int> host_a;
};

static std::vector<int> download(const int* d, int n = kN) {
  std::vector<int> h(n);
  CHECK(cudaMemcpy(h.data(), d, sizeof(int) * n, cudaMemcpyDeviceToHost));
  return h;
}

// Whether every element is `mul * a + add` (times `times`).
static bool all_equal(const std::vector<int>& got, const std::vector<int>& a, int times, int mul, int add) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != times * (a[i] * mul + add)) return false;
  }
  return true;
}

// b = 3a + 1; c = b; b = 0; acc += c — one replay of the captured graph.
static void capture_work(const Buffers& m, cudaStream_t s) {
  scale<<<(kN + 255) / 256, 256, 0, s>>>(m.a, m.b, kN, 3);
  CHECK_LAUNCH();
  CHECK(cudaMemcpyAsync(m.c, m.b, kBytes, cudaMemcpyDeviceToDevice, s));
  CHECK(cudaMemsetAsync(m.b, 0, kBytes, s));
  accumulate<<<(kN + 127) / 128, 128, 0, s>>>(m.acc, m.c, kN);
  CHECK_LAUNCH();
}

static void count_node_types(cudaGraph_t graph) {
  size_t count = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  int kernels = 0, copies = 0, memsets = 0, other = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    CHECK(cudaGraphNodeGetType(node, &type));
    if (type == cudaGraphNodeTypeKernel) ++kernels;
    else if (type == cudaGraphNodeTypeMemcpy) ++copies;
    else if (type == cudaGraphNodeTypeMemset) ++memsets;
    else ++other;
  }
  std::printf("graph nodes: %zu (kernel=%d memcpy=%d memset=%d other=%d)\n", count, kernels, copies, memsets, other);
}

// The captured "scale" node (the one launched with 256 threads per block).
static cudaGraphNode_t scale_node(cudaGraph_t graph) {
  size_t count = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    CHECK(cudaGraphNodeGetType(node, &type));
    if (type != cudaGraphNodeTypeKernel) continue;
    cudaKernelNodeParams p{};
    CHECK(cudaGraphKernelNodeGetParams(node, &p));
    if (p.blockDim.x == 256) return node;
  }
  return nullptr;
}

static void captured_graph(Buffers& m, cudaStream_t s, cudaStream_t s2) {
  std::printf("before capture: %s\n", status_name(capture_status(s)));
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  std::printf("during capture: %s (other stream %s)\n", status_name(capture_status(s)),
              status_name(capture_status(s2)));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  CHECK(cudaStreamGetCaptureInfo(s, &status, &id, nullptr, nullptr, nullptr, nullptr));
  expect(status == cudaStreamCaptureStatusActive && id != 0, "capture info: active, with an id");
  capture_work(m, s);
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(s, &graph));
  std::printf("after capture: %s\n", status_name(capture_status(s)));
  count_node_types(graph);
  std::vector<int> acc = download(m.acc);
  expect(all_equal(acc, m.host_a, 0, 0, 0), "captured work did not run");

  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiateWithFlags(&exec, graph, 0));
  CHECK(cudaGraphUpload(exec, s));
  for (int i = 0; i < 10; ++i) CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  expect(all_equal(download(m.acc), m.host_a, 10, 3, 1), "10 launches: acc = 10 (3a + 1)");
  expect(all_equal(download(m.c), m.host_a, 1, 3, 1), "c = 3a + 1 (the copy node)");
  expect(all_equal(download(m.b), m.host_a, 0, 0, 0), "b = 0 (the memset node)");
  CHECK(cudaGraphLaunch(exec, s2));
  CHECK(cudaStreamSynchronize(s2));
  expect(all_equal(download(m.acc), m.host_a, 11, 3, 1), "a launch on a second stream: acc = 11 (3a + 1)");

  // The executable graph's scale node multiplies by 5 from now on; the graph's does not.
  cudaGraphNode_t node = scale_node(graph);
  expect(node != nullptr, "found the scale kernel node");
  if (node != nullptr) {
    cudaKernelNodeParams p{};
    CHECK(cudaGraphKernelNodeGetParams(node, &p));
    std::printf("scale node: grid=%u block=%u shared=%u\n", p.gridDim.x, p.blockDim.x, p.sharedMemBytes);
    int n = kN, mul = 5;
    void* args[] = {&m.a, &m.b, &n, &mul};
    p.func = reinterpret_cast<void*>(scale);
    p.kernelParams = args;
    p.extra = nullptr;
    CHECK(cudaGraphExecKernelNodeSetParams(exec, node, &p));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    expect(all_equal(download(m.c), m.host_a, 1, 5, 1), "updated exec node: c = 5a + 1");
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
}

static void illegal_calls(Buffers& m, cudaStream_t s) {
  // A sync of the capturing stream: refused, and the capture is invalidated.
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  scale<<<(kN + 255) / 256, 256, 0, s>>>(m.a, m.b, kN, 7);
  CHECK_LAUNCH();
  EXPECT_ERR(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  std::printf("after the sync: %s\n", status_name(capture_status(s)));
  cudaGraph_t graph = nullptr;
  EXPECT_ERR(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  expect(graph == nullptr, "no graph from an invalidated capture");
  std::printf("stream after the invalidated capture: %s\n", status_name(capture_status(s)));
  CHECK(cudaStreamSynchronize(s));

  // cudaMalloc in a global-mode capture (the native run says what it returns).
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  void* p = nullptr;
  REPORT(cudaMalloc(&p, 1 << 20));
  REPORT(cudaStreamEndCapture(s, &graph));
  if (graph != nullptr) CHECK(cudaGraphDestroy(graph));

  // ... and under a relaxed thread mode, as PyTorch's allocator allocates during capture.
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  void* q = nullptr;
  EXPECT_ERR(cudaMalloc(&q, 1 << 20), cudaSuccess);
  CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  std::printf("exchanged back: %s\n", mode == cudaStreamCaptureModeRelaxed ? "relaxed" : "other");
  bump<<<1, 32, 0, s>>>(reinterpret_cast<int*>(q));
  CHECK_LAUNCH();
  EXPECT_ERR(cudaStreamEndCapture(s, &graph), cudaSuccess);
  if (graph != nullptr) CHECK(cudaGraphDestroy(graph));
  CHECK(cudaFree(q));
}

// s forks into s2 through an event and joins it back: both streams' kernels are in the graph.
static void fork_join(cudaStream_t s, cudaStream_t s2) {
  int* counters = nullptr;
  CHECK(cudaMalloc(&counters, 2 * sizeof(int)));
  CHECK(cudaMemset(counters, 0, 2 * sizeof(int)));
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t fork, join;
  CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaEventRecord(fork, s));
  CHECK(cudaStreamWaitEvent(s2, fork, 0));
  std::printf("forked stream: %s\n", status_name(capture_status(s2)));
  bump<<<1, 32, 0, s2>>>(counters + 1);
  CHECK_LAUNCH();
  bump<<<1, 32, 0, s>>>(counters);
  CHECK_LAUNCH();
  CHECK(cudaEventRecord(join, s2));
  CHECK(cudaStreamWaitEvent(s, join, 0));
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(s, &graph));
  std::printf("forked stream after the end: %s\n", status_name(capture_status(s2)));
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  std::vector<int> got = download(counters, 2);
  std::printf("fork/join counters after 3 launches: %d %d\n", got[0], got[1]);
  expect(got[0] == 3 && got[1] == 3, "both branches ran each launch");
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaEventDestroy(fork));
  CHECK(cudaEventDestroy(join));
  CHECK(cudaFree(counters));
}

// scale -> copy -> accumulate, built node by node.
static void built_graph(Buffers& m, cudaStream_t s) {
  CHECK(cudaMemset(m.acc, 0, kBytes));
  cudaGraph_t graph = nullptr;
  CHECK(cudaGraphCreate(&graph, 0));
  int n = kN, mul = 2;
  void* scaleArgs[] = {&m.a, &m.b, &n, &mul};
  cudaKernelNodeParams k{};
  k.func = reinterpret_cast<void*>(scale);
  k.gridDim = dim3((kN + 255) / 256);
  k.blockDim = dim3(256);
  k.kernelParams = scaleArgs;
  cudaGraphNode_t scaleNode = nullptr, copyNode = nullptr, accNode = nullptr;
  CHECK(cudaGraphAddKernelNode(&scaleNode, graph, nullptr, 0, &k));
  CHECK(cudaGraphAddMemcpyNode1D(&copyNode, graph, &scaleNode, 1, m.c, m.b, kBytes, cudaMemcpyDeviceToDevice));
  void* accArgs[] = {&m.acc, &m.c, &n};
  cudaKernelNodeParams a{};
  a.func = reinterpret_cast<void*>(accumulate);
  a.gridDim = dim3((kN + 127) / 128);
  a.blockDim = dim3(128);
  a.kernelParams = accArgs;
  CHECK(cudaGraphAddKernelNode(&accNode, graph, nullptr, 0, &a));
  CHECK(cudaGraphAddDependencies(graph, &copyNode, &accNode, nullptr, 1));
  count_node_types(graph);
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  expect(all_equal(download(m.acc), m.host_a, 2, 2, 1), "built graph, 2 launches: acc = 2 (2a + 1)");
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
}

int main() {
  Buffers m;
  Rng rng(19);
  m.host_a.resize(kN);
  for (int& v : m.host_a) v = rng.range(-1000, 1000);
  CHECK(cudaMalloc(&m.a, kBytes));
  CHECK(cudaMalloc(&m.b, kBytes));
  CHECK(cudaMalloc(&m.c, kBytes));
  CHECK(cudaMalloc(&m.acc, kBytes));
  CHECK(cudaMemcpy(m.a, m.host_a.data(), kBytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(m.acc, 0, kBytes));
  CHECK(cudaDeviceSynchronize());
  cudaStream_t s, s2;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));

  captured_graph(m, s, s2);
  illegal_calls(m, s);
  fork_join(s, s2);
  built_graph(m, s);

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaStreamDestroy(s2));
  for (int* p : {m.a, m.b, m.c, m.acc}) CHECK(cudaFree(p));
  return finish("graph_capture");
}
