// Stream capture and graph handles in libtally_client.so, against the in-process fake tallyd
// (which answers every call with success): what the client keeps and decides itself — which
// streams capture (and the truthful queries), forks through events, the capture-mode rules for
// cudaMalloc and cudaFree, calls refused on a capturing stream without a round trip, and graph,
// exec and node handles that are validated before use. tallyd's side: tests/fuzz/graph_session_test.cc.
#include "fake_tallyd.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <future>
#include <thread>
#include <vector>

namespace {

using tally::testing::FakeTallyd;

FakeTallyd* const server = &tally::testing::processFakeTallyd();

cudaStreamCaptureStatus statusOf(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  EXPECT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
  return status;
}

class StreamCapture : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&other_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    (void)cudaGetLastError();
    cudaStreamDestroy(stream_);
    cudaStreamDestroy(other_);
  }
  cudaStream_t stream_ = nullptr;
  cudaStream_t other_ = nullptr;
};

TEST_F(StreamCapture, TheQueriesFollowBeginAndEnd) {
  EXPECT_EQ(statusOf(stream_), cudaStreamCaptureStatusNone);
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(statusOf(stream_), cudaStreamCaptureStatusActive);
  EXPECT_EQ(statusOf(other_), cudaStreamCaptureStatusNone);
  EXPECT_EQ(statusOf(cudaStreamLegacy), cudaStreamCaptureStatusNone);  // a non-blocking stream captures
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 99;
  cudaGraph_t graphOut = reinterpret_cast<cudaGraph_t>(uintptr_t{1});
  EXPECT_EQ(cudaStreamGetCaptureInfo(stream_, &status, &id, &graphOut, nullptr, nullptr, nullptr), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  EXPECT_EQ(id, 0u);                // what the fake tallyd reported
  EXPECT_EQ(graphOut, nullptr);     // the capture's graph is tallyd's
  CUstreamCaptureStatus driverStatus = CU_STREAM_CAPTURE_STATUS_NONE;
  EXPECT_EQ(cuStreamIsCapturing(reinterpret_cast<CUstream>(stream_), &driverStatus), CUDA_SUCCESS);
  EXPECT_EQ(driverStatus, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  EXPECT_NE(graph, nullptr);
  EXPECT_EQ(statusOf(stream_), cudaStreamCaptureStatusNone);
  EXPECT_EQ(cudaStreamEndCapture(stream_, &graph), cudaErrorIllegalState);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
}

TEST_F(StreamCapture, BeginErrorsAreTheNativeOnes) {
  EXPECT_EQ(cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamBeginCapture(stream_, static_cast<cudaStreamCaptureMode>(7)), cudaErrorInvalidValue);
  auto* bogus = reinterpret_cast<cudaStream_t>(uintptr_t{0x1000});
  EXPECT_EQ(cudaStreamBeginCapture(bogus, cudaStreamCaptureModeGlobal), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamEndCapture(stream_, nullptr), cudaErrorInvalidValue);
}

TEST_F(StreamCapture, MallocInAGlobalCaptureIsRefusedAndInvalidatesIt) {
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  uint64_t calls = server->calls();
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 256), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(server->calls(), calls);  // refused here
  EXPECT_EQ(statusOf(stream_), cudaStreamCaptureStatusInvalidated);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream_, &graph), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(graph, nullptr);
  EXPECT_EQ(statusOf(stream_), cudaStreamCaptureStatusNone);
  EXPECT_EQ(cudaMalloc(&p, 256), cudaSuccess);  // no capture any more
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(StreamCapture, MallocUnderARelaxedThreadModeIsAllowed) {
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // as PyTorch's allocator does
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 256), cudaSuccess);
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  EXPECT_EQ(mode, cudaStreamCaptureModeRelaxed);
  EXPECT_EQ(statusOf(stream_), cudaStreamCaptureStatusActive);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(StreamCapture, AnotherThreadsGlobalCaptureBindsOnlyGlobalModeThreads) {
  std::promise<void> begun, checked;
  std::thread capturer([&] {
    EXPECT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
    begun.set_value();
    checked.get_future().wait();
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(stream_, &graph), cudaErrorStreamCaptureInvalidated);  // by this thread's cudaFree
  });
  begun.get_future().wait();
  cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal;
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 256), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);  // back to global
  EXPECT_EQ(cudaFree(nullptr), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream_, &graph), cudaErrorStreamCaptureWrongThread);
  checked.set_value();
  capturer.join();
}

TEST_F(StreamCapture, SyncsOfACapturingStreamAreRefusedWithoutARoundTrip) {
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), cudaSuccess);
  uint64_t calls = server->calls();
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamQuery(stream_), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported);  // in every mode
  EXPECT_EQ(cudaLaunchHostFunc(stream_, [](void*) {}, nullptr), cudaErrorStreamCaptureUnsupported);
  std::vector<char> pageable(64);
  EXPECT_EQ(cudaMemcpyAsync(pageable.data(), reinterpret_cast<void*>(uintptr_t{0x7f0000100000}), 64,
                            cudaMemcpyDeviceToHost, stream_),
            cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(server->calls(), calls);
  EXPECT_EQ(statusOf(stream_), cudaStreamCaptureStatusInvalidated);
  EXPECT_EQ(cudaStreamSynchronize(other_), cudaSuccess);  // another stream is not affected
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream_, &graph), cudaErrorStreamCaptureInvalidated);
}

TEST_F(StreamCapture, AWaitOnACapturedEventForksTheCapture) {
  cudaEvent_t event = nullptr;
  ASSERT_EQ(cudaEventCreate(&event), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(other_, event, 0), cudaSuccess);
  EXPECT_EQ(statusOf(other_), cudaStreamCaptureStatusActive);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(other_, &graph), cudaErrorStreamCaptureUnmatched);
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  EXPECT_EQ(statusOf(other_), cudaStreamCaptureStatusNone);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
}

TEST_F(StreamCapture, TheLegacyStreamIsNotToBeAskedWhileABlockingStreamCaptures) {
  cudaStream_t blocking = nullptr;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  EXPECT_EQ(cudaStreamIsCapturing(cudaStreamLegacy, &status), cudaErrorStreamCaptureImplicit);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(blocking, &graph), cudaSuccess);
  EXPECT_EQ(cudaStreamIsCapturing(cudaStreamLegacy, &status), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(blocking), cudaSuccess);
}

TEST_F(StreamCapture, DestroyingTheCapturingStreamEndsItsCapture) {
  cudaStream_t doomed = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&doomed, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(doomed, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(doomed), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 16), cudaSuccess);  // no capture binds this thread any more
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

// --- graph handles ---------------------------------------------------------------------------

TEST_F(StreamCapture, GraphAndExecHandlesAreValidated) {
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  EXPECT_EQ(cudaGraphUpload(exec, other_), cudaSuccess);
  EXPECT_EQ(cudaGraphInstantiate(nullptr, graph, 0), cudaErrorInvalidValue);

  auto* bogusExec = reinterpret_cast<cudaGraphExec_t>(uintptr_t{0x2000});
  auto* bogusGraph = reinterpret_cast<cudaGraph_t>(uintptr_t{0x3000});
  EXPECT_EQ(cudaGraphLaunch(bogusExec, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(graph), stream_), cudaErrorInvalidValue);  // not an exec
  EXPECT_EQ(cuGraphLaunch(reinterpret_cast<CUgraphExec>(bogusExec), nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphLaunch(nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cudaGraphInstantiateWithFlags(&exec, bogusGraph, 0), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphLaunch(exec, reinterpret_cast<cudaStream_t>(uintptr_t{0x1000})), cudaErrorInvalidResourceHandle);
  cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
  EXPECT_EQ(cudaGraphNodeGetType(reinterpret_cast<cudaGraphNode_t>(graph), &type), cudaErrorInvalidValue);

  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaErrorInvalidValue);  // stale
  EXPECT_EQ(cudaGraphLaunch(exec, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaErrorInvalidValue);
  EXPECT_EQ(cuGraphDestroy(reinterpret_cast<CUgraph>(graph)), CUDA_ERROR_INVALID_HANDLE);
  (void)cudaGetLastError();
}

TEST_F(StreamCapture, ExplicitGraphsTakeOnlyTheirOwnNodesAndDeviceMemory) {
  cudaGraph_t graph = nullptr, other = nullptr;
  EXPECT_EQ(cudaGraphCreate(&graph, 1), cudaErrorInvalidValue);  // flags must be 0
  ASSERT_EQ(cudaGraphCreate(&graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphCreate(&other, 0), cudaSuccess);
  size_t count = 7;
  ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &count), cudaSuccess);
  EXPECT_EQ(count, 0u);
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 64), cudaSuccess);
  std::vector<char> host(64);
  cudaGraphNode_t node = nullptr;
  EXPECT_EQ(cudaGraphAddMemcpyNode1D(&node, graph, nullptr, 0, device, host.data(), 64, cudaMemcpyHostToDevice),
            cudaErrorNotSupported);  // device to device only
  EXPECT_EQ(cudaGraphAddMemcpyNode1D(&node, graph, nullptr, 0, device, host.data(), 64, cudaMemcpyDefault),
            cudaErrorNotSupported);
  auto* foreignNode = reinterpret_cast<cudaGraphNode_t>(other);
  EXPECT_EQ(cudaGraphAddMemcpyNode1D(&node, graph, &foreignNode, 1, device, device, 8, cudaMemcpyDeviceToDevice),
            cudaErrorInvalidValue);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(other), cudaSuccess);
  EXPECT_EQ(cudaFree(device), cudaSuccess);
}

TEST_F(StreamCapture, HandBuiltNodesAndStructureQueriesAreCheckedBeforeAnythingIsSent) {
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaGraphCreate(&graph, 0), cudaSuccess);
  auto* bogusGraph = reinterpret_cast<cudaGraph_t>(uintptr_t{0x3000});
  auto* bogusNode = reinterpret_cast<cudaGraphNode_t>(uintptr_t{0x4000});
  auto* bogusEvent = reinterpret_cast<cudaEvent_t>(uintptr_t{0x5000});
  uint64_t calls = server->calls();
  cudaGraphNode_t node = nullptr;
  cudaMemsetParams memset{};
  memset.dst = reinterpret_cast<void*>(uintptr_t{0x7f0000100000});
  memset.elementSize = 3;
  memset.width = 4;
  memset.height = 1;
  EXPECT_EQ(cudaGraphAddMemsetNode(&node, graph, nullptr, 0, &memset), cudaErrorInvalidValue);  // no 3-byte memset
  memset.elementSize = 4;
  memset.width = 0;
  EXPECT_EQ(cudaGraphAddMemsetNode(&node, graph, nullptr, 0, &memset), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphAddMemsetNode(&node, graph, nullptr, 0, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphAddEventRecordNode(&node, graph, nullptr, 0, bogusEvent), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGraphAddEventWaitNode(&node, graph, nullptr, 0, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphAddChildGraphNode(&node, graph, nullptr, 0, graph), cudaErrorInvalidValue);  // itself
  EXPECT_EQ(cudaGraphAddChildGraphNode(&node, graph, nullptr, 0, bogusGraph), cudaErrorInvalidValue);
  EXPECT_EQ(cuGraphAddChildGraphNode(reinterpret_cast<CUgraphNode*>(&node), reinterpret_cast<CUgraph>(graph), nullptr,
                                     0, reinterpret_cast<CUgraph>(bogusGraph)),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cudaGraphAddEmptyNode(&node, graph, &bogusNode, 1), cudaErrorInvalidValue);  // not a node of the graph
  EXPECT_EQ(cudaGraphAddEmptyNode(nullptr, graph, nullptr, 0), cudaErrorInvalidValue);

  size_t count = 0;
  cudaGraphNode_t from[1];
  EXPECT_EQ(cudaGraphGetEdges(graph, from, nullptr, nullptr, &count), cudaErrorInvalidValue);  // both or neither
  EXPECT_EQ(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphGetRootNodes(bogusGraph, nullptr, &count), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphNodeGetDependencies(bogusNode, nullptr, nullptr, &count), cudaErrorInvalidValue);
  EXPECT_EQ(cuGraphNodeGetDependentNodes(reinterpret_cast<CUgraphNode>(bogusNode), nullptr, nullptr, &count),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cudaGraphRemoveDependencies(graph, &bogusNode, &bogusNode, nullptr, 1), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphDestroyNode(reinterpret_cast<cudaGraphNode_t>(graph)), cudaErrorInvalidValue);  // not a node
  EXPECT_EQ(cudaGraphClone(nullptr, graph), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphNodeFindInClone(&node, bogusNode, graph), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphDebugDotPrint(graph, nullptr, 0), cudaErrorInvalidValue);
  cudaMemsetParams params{};
  EXPECT_EQ(cudaGraphMemsetNodeGetParams(bogusNode, &params), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphMemsetNodeSetParams(bogusNode, &memset), cudaErrorInvalidValue);
  unsigned enabled = 0;
  EXPECT_EQ(cudaGraphNodeGetEnabled(nullptr, bogusNode, &enabled), cudaErrorInvalidValue);
  EXPECT_EQ(cuGraphNodeSetEnabled(reinterpret_cast<CUgraphExec>(uintptr_t{0x2000}),
                                  reinterpret_cast<CUgraphNode>(bogusNode), 1),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(server->calls(), calls);  // all refused here
  (void)cudaGetLastError();
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
}

// cudaGraphNodeFindInClone(pNode, originalNode, clonedGraph) answers for the clone only, and
// cudaGraphRemoveDependencies takes only nodes of the graph it is given (and live ones).
TEST_F(StreamCapture, CloneLookupsAndEdgeRemovalTakeOnlyTheRightGraphsNodes) {
  cudaGraph_t graph = nullptr, clone = nullptr;
  ASSERT_EQ(cudaGraphCreate(&graph, 0), cudaSuccess);
  cudaGraphNode_t first = nullptr, second = nullptr;
  ASSERT_EQ(cudaGraphAddEmptyNode(&first, graph, nullptr, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphAddEmptyNode(&second, graph, &first, 1), cudaSuccess);
  ASSERT_EQ(cudaGraphClone(&clone, graph), cudaSuccess);
  cudaGraphNode_t clonedFirst = nullptr, clonedSecond = nullptr;
  ASSERT_EQ(cudaGraphNodeFindInClone(&clonedFirst, first, clone), cudaSuccess);
  ASSERT_EQ(cudaGraphNodeFindInClone(&clonedSecond, second, clone), cudaSuccess);
  EXPECT_NE(clonedFirst, first);
  EXPECT_NE(clonedSecond, second);
  cudaGraphNode_t again = nullptr;
  EXPECT_EQ(cudaGraphNodeFindInClone(&again, first, clone), cudaSuccess);
  EXPECT_EQ(again, clonedFirst);  // one handle per node

  uint64_t calls = server->calls();
  cudaGraphNode_t found = clonedFirst;
  EXPECT_EQ(cudaGraphNodeFindInClone(&found, first, graph), cudaErrorInvalidValue);  // the original is no clone
  EXPECT_EQ(found, nullptr);
  EXPECT_EQ(cudaGraphNodeFindInClone(&found, clonedFirst, clone), cudaErrorInvalidValue);  // a node of the clone itself
  EXPECT_EQ(cudaGraphRemoveDependencies(clone, &first, &clonedSecond, nullptr, 1), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphRemoveDependencies(clone, &clonedFirst, &second, nullptr, 1), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphRemoveDependencies(graph, &clonedFirst, &clonedSecond, nullptr, 1), cudaErrorInvalidValue);
  EXPECT_EQ(server->calls(), calls);  // all refused here
  EXPECT_EQ(cudaGraphRemoveDependencies(clone, &clonedFirst, &clonedSecond, nullptr, 1), cudaSuccess);

  ASSERT_EQ(cudaGraphDestroyNode(clonedSecond), cudaSuccess);
  calls = server->calls();
  EXPECT_EQ(cudaGraphRemoveDependencies(clone, &clonedFirst, &clonedSecond, nullptr, 1), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphNodeFindInClone(&found, second, clone), cudaErrorInvalidValue);  // removed from the clone
  EXPECT_EQ(server->calls(), calls);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaGraphDestroy(clone), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
}

TEST_F(StreamCapture, AnExecutableGraphKeepsItsInstantiateFlags) {
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaGraphCreate(&graph, 0), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch), cudaSuccess);
  unsigned long long flags = 0;
  EXPECT_EQ(cudaGraphExecGetFlags(exec, &flags), cudaSuccess);
  EXPECT_EQ(flags, static_cast<unsigned long long>(cudaGraphInstantiateFlagAutoFreeOnLaunch));
  cuuint64_t driverFlags = 0;
  EXPECT_EQ(cuGraphExecGetFlags(reinterpret_cast<CUgraphExec>(exec), &driverFlags), CUDA_SUCCESS);
  EXPECT_EQ(driverFlags, flags);
  EXPECT_EQ(cudaGraphExecGetFlags(exec, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphExecGetFlags(exec, &flags), cudaErrorInvalidValue);  // stale
  (void)cudaGetLastError();
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
}

// Without memory shared with tallyd (as over TCP) a host node could never hand its turn to the
// client: refused, and nothing reaches tallyd.
void CUDART_CB neverRuns(void*) {}

TEST_F(StreamCapture, HostNodesNeedSharedMemory) {
  cudaGraph_t graph;
  ASSERT_EQ(cudaGraphCreate(&graph, 0), cudaSuccess);
  uint64_t before = server->callsOf(tally::wire::Call::GRAPH_ADD_NODE);
  cudaGraphNode_t node;
  cudaHostNodeParams params{neverRuns, nullptr};
  EXPECT_EQ(cudaGraphAddHostNode(&node, graph, nullptr, 0, &params), cudaErrorNotSupported);
  EXPECT_EQ(server->callsOf(tally::wire::Call::GRAPH_ADD_NODE), before);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
}

}  // namespace
