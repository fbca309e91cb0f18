// Graph host nodes through libtally_client.so, against the fake tallyd sharing memory as over a
// Unix socket: the test plays tallyd's GPU, which at each launch writes the sequence the client
// chose into the node's `reached` word and waits for `done` (schema/graph.capnp HostNodeLaunch).
// The function runs in the client only once the "GPU" got there, once per launch, with the
// parameters of the executable graph; every exec has its own words.
#include "fake_tallyd.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using tally::testing::FakeTallyd;

FakeTallyd* const server = [] {
  FakeTallyd* s = &tally::testing::processFakeTallyd();
  s->offerSharedHostMemory(true);
  return s;
}();

void CUDART_CB countCall(void* counter) { static_cast<std::atomic<int>*>(counter)->fetch_add(1); }

bool waitFor(const std::function<bool()>& condition) {
  for (auto deadline = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < deadline;) {
    if (condition()) return true;
    std::this_thread::sleep_for(50us);
  }
  return false;
}

uint32_t load(uint64_t address) { return __atomic_load_n(reinterpret_cast<uint32_t*>(address), __ATOMIC_ACQUIRE); }

// The GPU reaches the host node of this launch, and the client's thread answers.
bool gpuReaches(const FakeTallyd::HostNodeWords& w) {
  __atomic_store_n(reinterpret_cast<uint32_t*>(w.reachedWord), w.sequence, __ATOMIC_RELEASE);
  return waitFor([&] { return load(w.doneWord) >= w.sequence; });
}

class GraphHostNodes : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    ASSERT_EQ(cudaGraphCreate(&graph_, 0), cudaSuccess);
    cudaHostNodeParams params{countCall, &calls_};
    ASSERT_EQ(cudaGraphAddHostNode(&node_, graph_, nullptr, 0, &params), cudaSuccess);
  }
  void TearDown() override {
    cudaGraphDestroy(graph_);
    cudaStreamDestroy(stream_);
  }
  // Launches `exec` and returns the words and sequence the client gave its one host node.
  FakeTallyd::HostNodeWords launch(cudaGraphExec_t exec) {
    EXPECT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
    EXPECT_EQ(cudaStreamQuery(stream_), cudaSuccess);  // a round trip: the launch has arrived
    std::vector<FakeTallyd::HostNodeWords> words = server->lastGraphLaunchHostNodes();
    EXPECT_EQ(words.size(), 1u);
    return words.empty() ? FakeTallyd::HostNodeWords{} : words[0];
  }
  cudaStream_t stream_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphNode_t node_ = nullptr;
  std::atomic<int> calls_{0};
};

TEST_F(GraphHostNodes, TheFunctionRunsOncePerLaunchWhenTheGpuGetsThere) {
  cudaGraphNodeType type;
  ASSERT_EQ(cudaGraphNodeGetType(node_, &type), cudaSuccess);
  EXPECT_EQ(type, cudaGraphNodeTypeHost);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph_, 0), cudaSuccess);
  FakeTallyd::HostNodeWords first = launch(exec);
  EXPECT_NE(first.reachedWord, 0u);
  std::this_thread::sleep_for(5ms);
  EXPECT_EQ(calls_.load(), 0) << "ran before the GPU reached the node";
  ASSERT_TRUE(gpuReaches(first));
  EXPECT_EQ(calls_.load(), 1);

  FakeTallyd::HostNodeWords second = launch(exec);
  EXPECT_EQ(second.node, first.node);
  EXPECT_EQ(second.reachedWord, first.reachedWord);  // the exec's own words
  EXPECT_GT(second.sequence, first.sequence);
  ASSERT_TRUE(gpuReaches(second));
  EXPECT_EQ(calls_.load(), 2);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
}

TEST_F(GraphHostNodes, ParametersOfTheGraphAndOfAnExec) {
  cudaHostNodeParams got{};
  ASSERT_EQ(cudaGraphHostNodeGetParams(node_, &got), cudaSuccess);
  EXPECT_EQ(got.fn, countCall);
  EXPECT_EQ(got.userData, &calls_);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph_, 0), cudaSuccess);

  std::atomic<int> execCalls{0};
  cudaHostNodeParams execParams{countCall, &execCalls};
  ASSERT_EQ(cudaGraphExecHostNodeSetParams(exec, node_, &execParams), cudaSuccess);
  ASSERT_TRUE(gpuReaches(launch(exec)));
  EXPECT_EQ(execCalls.load(), 1);
  EXPECT_EQ(calls_.load(), 0);
  ASSERT_EQ(cudaGraphHostNodeGetParams(node_, &got), cudaSuccess);
  EXPECT_EQ(got.userData, &calls_) << "the graph keeps its own parameters";

  std::atomic<int> graphCalls{0};
  cudaHostNodeParams graphParams{countCall, &graphCalls};
  ASSERT_EQ(cudaGraphHostNodeSetParams(node_, &graphParams), cudaSuccess);
  ASSERT_TRUE(gpuReaches(launch(exec)));
  EXPECT_EQ(execCalls.load(), 2) << "an existing exec keeps what it was instantiated with";
  cudaGraphExec_t later;
  ASSERT_EQ(cudaGraphInstantiate(&later, graph_, 0), cudaSuccess);
  ASSERT_TRUE(gpuReaches(launch(later)));
  EXPECT_EQ(graphCalls.load(), 1);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphExecDestroy(later), cudaSuccess);
}

TEST_F(GraphHostNodes, EveryExecHasItsOwnWordsAndGivesThemBack) {
  cudaGraphExec_t a, b;
  ASSERT_EQ(cudaGraphInstantiate(&a, graph_, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&b, graph_, 0), cudaSuccess);
  FakeTallyd::HostNodeWords wa = launch(a);
  FakeTallyd::HostNodeWords wb = launch(b);
  EXPECT_NE(wa.reachedWord, wb.reachedWord);
  ASSERT_TRUE(gpuReaches(wb));
  ASSERT_TRUE(gpuReaches(wa));
  EXPECT_EQ(calls_.load(), 2);
  EXPECT_EQ(cudaGraphExecDestroy(a), cudaSuccess);
  std::this_thread::sleep_for(5ms);
  cudaGraphExec_t c;
  ASSERT_EQ(cudaGraphInstantiate(&c, graph_, 0), cudaSuccess);
  FakeTallyd::HostNodeWords wc = launch(c);
  EXPECT_EQ(wc.reachedWord, wa.reachedWord) << "a destroyed exec's words were not reused";
  EXPECT_GT(wc.sequence, wa.sequence) << "a sequence was reused on the same words";
  ASSERT_TRUE(gpuReaches(wc));
  EXPECT_EQ(calls_.load(), 3);
  EXPECT_EQ(cudaGraphExecDestroy(b), cudaSuccess);
  EXPECT_EQ(cudaGraphExecDestroy(c), cudaSuccess);
}

TEST_F(GraphHostNodes, ACloneKeepsTheFunction) {
  cudaGraph_t clone;
  ASSERT_EQ(cudaGraphClone(&clone, graph_), cudaSuccess);
  cudaGraphNode_t cloned;
  ASSERT_EQ(cudaGraphNodeFindInClone(&cloned, node_, clone), cudaSuccess);
  cudaHostNodeParams got{};
  ASSERT_EQ(cudaGraphHostNodeGetParams(cloned, &got), cudaSuccess);
  EXPECT_EQ(got.fn, countCall);
  EXPECT_EQ(got.userData, &calls_);
  EXPECT_EQ(cudaGraphDestroy(clone), cudaSuccess);
}

TEST_F(GraphHostNodes, BadArgumentsAreRefusedBeforeTheWire) {
  uint64_t before = server->callsOf(tally::wire::Call::GRAPH_ADD_NODE);
  cudaGraphNode_t node;
  cudaHostNodeParams noFunction{nullptr, nullptr};
  EXPECT_EQ(cudaGraphAddHostNode(&node, graph_, nullptr, 0, &noFunction), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphAddHostNode(&node, graph_, nullptr, 0, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(server->callsOf(tally::wire::Call::GRAPH_ADD_NODE), before);
  cudaGraphNode_t empty;
  ASSERT_EQ(cudaGraphAddEmptyNode(&empty, graph_, nullptr, 0), cudaSuccess);
  cudaHostNodeParams got{};
  EXPECT_EQ(cudaGraphHostNodeGetParams(empty, &got), cudaErrorInvalidValue);  // not a host node
  cudaGraph_t other;
  ASSERT_EQ(cudaGraphCreate(&other, 0), cudaSuccess);
  cudaGraphExec_t otherExec;
  ASSERT_EQ(cudaGraphInstantiate(&otherExec, other, 0), cudaSuccess);
  cudaHostNodeParams params{countCall, &calls_};
  EXPECT_EQ(cudaGraphExecHostNodeSetParams(otherExec, node_, &params), cudaErrorInvalidValue);  // another graph's node
  EXPECT_EQ(cudaGraphExecDestroy(otherExec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(other), cudaSuccess);
}

TEST_F(GraphHostNodes, ExecUpdateReportsTheResult) {
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph_, 0), cudaSuccess);
  cudaGraphExecUpdateResultInfo info{};
  info.result = cudaGraphExecUpdateError;
  EXPECT_EQ(cudaGraphExecUpdate(exec, graph_, &info), cudaSuccess);
  EXPECT_EQ(info.result, cudaGraphExecUpdateSuccess);
  EXPECT_EQ(info.errorNode, nullptr);
  EXPECT_EQ(cudaGraphExecUpdate(exec, reinterpret_cast<cudaGraph_t>(&info), &info), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
}

// The generic node API builds the same nodes as the kind's own add function.
TEST_F(GraphHostNodes, TheGenericAddNodeBuildsHostAndEmptyNodes) {
  cudaGraphNodeParams host{};
  host.type = cudaGraphNodeTypeHost;
  host.host.fn = countCall;
  host.host.userData = &calls_;
  cudaGraphNode_t node;
  ASSERT_EQ(cudaGraphAddNode(&node, graph_, &node_, nullptr, 1, &host), cudaSuccess);
  cudaGraphNodeType type;
  ASSERT_EQ(cudaGraphNodeGetType(node, &type), cudaSuccess);
  EXPECT_EQ(type, cudaGraphNodeTypeHost);
  cudaHostNodeParams got{};
  ASSERT_EQ(cudaGraphHostNodeGetParams(node, &got), cudaSuccess);
  EXPECT_EQ(got.userData, &calls_);

  CUgraphNodeParams empty{};
  empty.type = CU_GRAPH_NODE_TYPE_EMPTY;
  CUgraphNode driverNode;
  ASSERT_EQ(cuGraphAddNode(&driverNode, reinterpret_cast<CUgraph>(graph_), nullptr, nullptr, 0, &empty), CUDA_SUCCESS);
  ASSERT_EQ(cudaGraphNodeGetType(reinterpret_cast<cudaGraphNode_t>(driverNode), &type), cudaSuccess);
  EXPECT_EQ(type, cudaGraphNodeTypeEmpty);

  uint64_t before = server->callsOf(tally::wire::Call::GRAPH_ADD_NODE);
  cudaGraphNodeParams alloc{};
  alloc.type = cudaGraphNodeTypeMemAlloc;
  EXPECT_EQ(cudaGraphAddNode(&node, graph_, nullptr, nullptr, 0, &alloc), cudaErrorNotSupported);
  cudaGraphEdgeData programmatic{};
  programmatic.type = cudaGraphDependencyTypeProgrammatic;
  EXPECT_EQ(cudaGraphAddNode(&node, graph_, &node_, &programmatic, 1, &host), cudaErrorNotSupported);
  EXPECT_EQ(cudaGraphAddNode(&node, graph_, nullptr, nullptr, 0, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(server->callsOf(tally::wire::Call::GRAPH_ADD_NODE), before);
  (void)cudaGetLastError();
}

// A replay of a capture would never hand the client its turn: refused before anything is queued.
TEST_F(GraphHostNodes, LaunchingIntoACaptureIsRefused) {
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph_, 0), cudaSuccess);
  cudaStream_t capturing;
  ASSERT_EQ(cudaStreamCreateWithFlags(&capturing, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(capturing, cudaStreamCaptureModeRelaxed), cudaSuccess);
  uint64_t before = server->callsOf(tally::wire::Call::GRAPH_LAUNCH);
  EXPECT_EQ(cudaGraphLaunch(exec, capturing), cudaErrorNotSupported);
  EXPECT_EQ(server->callsOf(tally::wire::Call::GRAPH_LAUNCH), before);
  cudaGraph_t captured = nullptr;
  (void)cudaStreamEndCapture(capturing, &captured);
  if (captured != nullptr) cudaGraphDestroy(captured);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaStreamDestroy(capturing), cudaSuccess);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
}

}  // namespace
