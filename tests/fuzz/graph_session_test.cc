// CUDA graphs through tallyd's real request handlers, on the fake GPU (fake_gpu/fake_libcuda.cc:
// capture records nodes instead of doing the work, an "add" kernel adds 1 to the u32 its first
// parameter points at). Each test is one or two tenants — a Session over a socketpair, exactly
// as tallyd runs a connected client — driven call by call:
//  - capture, instantiate, launch: captured work does not run, each launch runs all of it;
//  - ids are the tenant's own and validated (another tenant's graph id is unknown here);
//  - calls that must not run on a capturing stream get the native error and invalidate it;
//  - a tenant that leaves mid-capture, with graphs and executable graphs, leaves none behind;
//  - under the priority scheduler, a high-priority and a best-effort tenant both capture;
//  - graphs built by hand: memset, event, empty and child graph nodes run; edges, clones and
//    removed nodes round-trip by node id; memory, events and graphs are the tenant's own;
//  - stream memory operations (cuStreamWriteValue32 ...) run on the tenant's own memory only,
//    on the same harness;
//  - a memory pool's trim gives back what the tenant freed and waited for;
//  - a best-effort tenant's thread runs nicer than a high-priority tenant's.
#include "tests/fuzz/graph_session_harness.h"

#include <cuda.h>
#include <dirent.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <cerrno>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <utility>
#include <vector>

namespace tally {
namespace {

// --- capture, instantiate, launch --------------------------------------------------------------

TEST(GraphSession, CapturedWorkRunsOnlyWhenTheGraphIsLaunched) {
  Tenant t(server());
  uint64_t counter = t.prepare();
  Answer begun = t.beginCapture(kStream);
  ASSERT_EQ(begun.status, CUDA_SUCCESS);
  EXPECT_NE(begun.value, 0u);  // the driver's capture id
  for (int i = 0; i < 3; ++i) t.launchAdd(kStream, counter);
  EXPECT_EQ(t.read(counter), 0u);  // captured, not run (the legacy stream is free to use)
  ASSERT_EQ(t.endCapture(kStream, 100).status, CUDA_SUCCESS);
  Answer nodes = t.call([](wire::Call::Builder c) { c.initGraphGetNodes().setGraph(100); });
  EXPECT_EQ(nodes.status, CUDA_SUCCESS);
  EXPECT_EQ(nodes.nodeTypes, std::vector<uint8_t>(3, CU_GRAPH_NODE_TYPE_KERNEL));
  ASSERT_EQ(t.instantiate(100, 200).status, CUDA_SUCCESS);
  for (int i = 0; i < 10; ++i) t.launchGraph(200, kStream);
  EXPECT_EQ(t.read(counter), 30u);
  t.createStream(kOtherStream, true);
  t.launchGraph(200, kOtherStream);  // on a second stream
  EXPECT_EQ(t.read(counter), 33u);
  EXPECT_EQ(t.synchronize(kStream).status, CUDA_SUCCESS);  // not capturing any more
}

TEST(GraphSession, NodesAndKernelParametersByTheTenantsIds) {
  Tenant t(server());
  uint64_t counter = t.prepare();
  ASSERT_EQ(t.beginCapture(kStream).status, CUDA_SUCCESS);
  t.launchAdd(kStream, counter);
  t.launchAdd(kStream, counter);
  ASSERT_EQ(t.endCapture(kStream, 100).status, CUDA_SUCCESS);
  Answer nodes = t.call([](wire::Call::Builder c) { c.initGraphGetNodes().setGraph(100); });
  ASSERT_EQ(nodes.status, CUDA_SUCCESS);
  EXPECT_EQ(nodes.nodeTypes, std::vector<uint8_t>(2, CU_GRAPH_NODE_TYPE_KERNEL));
  Answer params = t.call([](wire::Call::Builder c) {
    auto n = c.initGraphKernelNodeGetParams();
    n.setGraph(100);
    n.setNode(1);
  });
  ASSERT_EQ(params.status, CUDA_SUCCESS);
  EXPECT_EQ(params.nodeFunction, kFunction);  // the tenant's handle, not a driver address
  ASSERT_EQ(params.nodeParams.size(), kParamBytes);
  uint64_t pointer = 0;
  std::memcpy(&pointer, params.nodeParams.data(), sizeof(pointer));
  EXPECT_EQ(pointer, counter);

  // Node 1 of the executable graph now adds to the next word; the graph's own node is unchanged.
  ASSERT_EQ(t.instantiate(100, 200).status, CUDA_SUCCESS);
  uint64_t next = counter + 4;
  std::vector<uint8_t> moved(kParamBytes, 0);
  std::memcpy(moved.data(), &next, sizeof(next));
  Answer set = t.call([&](wire::Call::Builder c) {
    auto s = c.initGraphKernelNodeSetParams();
    s.setExec(200);
    s.initNode().setGraph(100);
    s.getNode().setNode(1);
    auto p = s.initParams();
    p.setFunction(kFunction);
    for (auto d : {p.initGrid(), p.initBlock()}) {
      d.setX(1);
      d.setY(1);
      d.setZ(1);
    }
    p.setParams(kj::arrayPtr(moved.data(), moved.size()));
  });
  ASSERT_EQ(set.status, CUDA_SUCCESS);
  t.launchGraph(200, kStream);
  EXPECT_EQ(t.read(counter), 1u);
  EXPECT_EQ(t.read(next), 1u);
}

TEST(GraphSession, ExplicitConstructionKernelAndDeviceCopyNodes) {
  Tenant t(server());
  uint64_t counter = t.prepare();
  ASSERT_EQ(t.call([](wire::Call::Builder c) { c.initGraphCreate().setGraph(300); }).status, CUDA_SUCCESS);
  std::vector<uint8_t> params(kParamBytes, 0);
  std::memcpy(params.data(), &counter, sizeof(counter));
  Answer kernel = t.call([&](wire::Call::Builder c) {
    auto a = c.initGraphAddKernelNode();
    a.setGraph(300);
    auto p = a.initParams();
    p.setFunction(kFunction);
    for (auto d : {p.initGrid(), p.initBlock()}) {
      d.setX(1);
      d.setY(1);
      d.setZ(1);
    }
    p.setParams(kj::arrayPtr(params.data(), params.size()));
  });
  ASSERT_EQ(kernel.status, CUDA_SUCCESS);
  EXPECT_EQ(kernel.value, 1u);
  auto copyNode = [&](uint64_t dst, uint64_t src, uint64_t width) {
    return t.call([&](wire::Call::Builder c) {
      auto a = c.initGraphAddMemcpyNode();
      a.setGraph(300);
      a.initDependencies(1).set(0, 1);
      a.setDst(dst);
      a.setSrc(src);
      a.setWidth(width);
    });
  };
  Answer copy = copyNode(counter + 8, counter, 4);
  ASSERT_EQ(copy.status, CUDA_SUCCESS);
  EXPECT_EQ(copy.value, 2u);
  EXPECT_EQ(copyNode(counter + 8, counter, 64).status, CUDA_ERROR_INVALID_VALUE);  // past the allocation
  EXPECT_EQ(copyNode(counter, 0x1000, 4).status, CUDA_ERROR_INVALID_VALUE);        // not the tenant's memory
  Answer edge = t.call([](wire::Call::Builder c) {
    auto a = c.initGraphAddDependencies();
    a.setGraph(300);
    a.initFrom(1).set(0, 1);
    a.initTo(1).set(0, 9);  // no node 9
  });
  EXPECT_EQ(edge.status, CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(t.instantiate(300, 301).status, CUDA_SUCCESS);
  t.launchGraph(301, kStream);
  t.launchGraph(301, kStream);
  EXPECT_EQ(t.read(counter), 2u);
  EXPECT_EQ(t.read(counter + 8), 2u);  // copied after the kernel, each time
}

// Empty, memset, event and child graph nodes, and the structure calls: every memory range, event
// and graph they name is the tenant's own (checked before the driver is asked).
using NodeKind = std::function<void(wire::AddNode::Builder)>;

Answer addNode(Tenant& t, uint64_t graph, const NodeKind& kind, std::vector<uint32_t> dependencies = {}) {
  return t.call([&](wire::Call::Builder c) {
    auto a = c.initGraphAddNode();
    a.setGraph(graph);
    auto deps = a.initDependencies(static_cast<unsigned>(dependencies.size()));
    for (unsigned i = 0; i < dependencies.size(); ++i) deps.set(i, dependencies[i]);
    kind(a);
  });
}

NodeKind memsetOf(uint64_t dst, uint64_t width, uint8_t elementSize = 4) {
  return [=](wire::AddNode::Builder a) {
    auto m = a.initMemset();
    m.setDst(dst);
    m.setWidth(width);
    m.setElementSize(elementSize);
    m.setValue(7);
  };
}

Answer removeEdge(Tenant& t, uint64_t graph, uint32_t from, uint32_t to) {
  return t.call([&](wire::Call::Builder c) {
    auto r = c.initGraphRemoveDependencies();
    r.setGraph(graph);
    r.initFrom(1).set(0, from);
    r.initTo(1).set(0, to);
  });
}

TEST(GraphSession, HandBuiltMemsetEventAndChildGraphNodesRunAndKeepTheirStructure) {
  Tenant t(server());
  uint64_t counter = t.prepare();
  t.post([](wire::Call::Builder c) { c.initEventCreate().setEvent(kEvent); });
  for (uint64_t g : {300, 400}) {
    ASSERT_EQ(t.call([&](wire::Call::Builder c) { c.initGraphCreate().setGraph(g); }).status, CUDA_SUCCESS);
  }
  // The child sets word 2 to 7; the parent: memset word 0 → empty → child, and an event record
  // and wait after the memset.
  ASSERT_EQ(addNode(t, 400, memsetOf(counter + 8, 1)).value, 1u);
  Answer set = addNode(t, 300, memsetOf(counter, 1));
  ASSERT_EQ(set.status, CUDA_SUCCESS);
  EXPECT_EQ(set.value, 1u);
  EXPECT_EQ(addNode(t, 300, [](wire::AddNode::Builder n) { n.setEmpty(); }, {1}).value, 2u);
  EXPECT_EQ(addNode(t, 300, [](wire::AddNode::Builder n) { n.setChildGraph(400); }, {2}).value, 3u);
  EXPECT_EQ(addNode(t, 300, [](wire::AddNode::Builder n) { n.setEventRecord(kEvent); }, {1}).value, 4u);
  EXPECT_EQ(addNode(t, 300, [](wire::AddNode::Builder n) { n.setEventWait(kEvent); }, {4}).value, 5u);
  Answer nodes = t.call([](wire::Call::Builder c) { c.initGraphGetNodes().setGraph(300); });
  EXPECT_EQ(nodes.nodeTypes, (std::vector<uint8_t>{CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_EMPTY,
                                                   CU_GRAPH_NODE_TYPE_GRAPH, CU_GRAPH_NODE_TYPE_EVENT_RECORD,
                                                   CU_GRAPH_NODE_TYPE_WAIT_EVENT}));
  Answer edges = t.call([](wire::Call::Builder c) { c.initGraphGetEdges().setGraph(300); });
  ASSERT_EQ(edges.status, CUDA_SUCCESS);
  EXPECT_EQ(edges.edges, (std::vector<std::pair<uint32_t, uint32_t>>{{1, 2}, {2, 3}, {1, 4}, {4, 5}}));

  ASSERT_EQ(t.instantiate(300, 301).status, CUDA_SUCCESS);
  t.launchGraph(301, kStream);
  EXPECT_EQ(t.read(counter), 7u);
  EXPECT_EQ(t.read(counter + 8), 7u);  // by the child graph

  // A clone keeps the ids; removing an edge and a node there leaves the original as it was.
  ASSERT_EQ(t.call([](wire::Call::Builder c) {
              auto g = c.initGraphClone();
              g.setGraph(300);
              g.setClone(302);
            }).status, CUDA_SUCCESS);
  EXPECT_EQ(removeEdge(t, 302, 4, 5).status, CUDA_SUCCESS);
  Answer destroyed = t.call([](wire::Call::Builder c) {
    auto n = c.initGraphDestroyNode();
    n.setGraph(302);
    n.setNode(2);
  });
  EXPECT_EQ(destroyed.status, CUDA_SUCCESS);
  Answer cloneNodes = t.call([](wire::Call::Builder c) { c.initGraphGetNodes().setGraph(302); });
  ASSERT_EQ(cloneNodes.nodeTypes.size(), 5u);
  EXPECT_EQ(cloneNodes.nodeTypes[1], wire::K_REMOVED_NODE);  // the others keep their ids
  EXPECT_EQ(cloneNodes.nodeTypes[2], CU_GRAPH_NODE_TYPE_GRAPH);
  Answer cloneEdges = t.call([](wire::Call::Builder c) { c.initGraphGetEdges().setGraph(302); });
  EXPECT_EQ(cloneEdges.edges, (std::vector<std::pair<uint32_t, uint32_t>>{{1, 4}}));
  Answer original = t.call([](wire::Call::Builder c) { c.initGraphGetEdges().setGraph(300); });
  EXPECT_EQ(original.edges.size(), 4u);
}

// Node `node` of graph `graph`, in executable graph `exec` (0: the graph's own node).
void setTarget(wire::ExecNodeRef::Builder target, uint64_t exec, uint64_t graph, uint32_t node) {
  target.setExec(exec);
  target.initNode().setGraph(graph);
  target.getNode().setNode(node);
}

Answer setMemsetNode(Tenant& t, uint64_t exec, uint64_t dst, uint32_t value) {
  return t.call([&](wire::Call::Builder c) {
    auto s = c.initGraphMemsetNodeSetParams();
    setTarget(s.initTarget(), exec, 300, 1);
    auto m = s.initParams();
    m.setDst(dst);
    m.setWidth(1);
    m.setElementSize(4);
    m.setValue(value);
  });
}

Answer setEnabled(Tenant& t, uint64_t exec, bool enabled) {
  return t.call([&](wire::Call::Builder c) {
    auto s = c.initGraphNodeSetEnabled();
    setTarget(s.initTarget(), exec, 300, 1);
    s.setEnabled(enabled);
  });
}

TEST(GraphSession, MemsetNodeParametersAndDisabledNodesOfTheTenantsOwnGraphs) {
  Tenant t(server());
  uint64_t counter = t.prepare();
  ASSERT_EQ(t.call([](wire::Call::Builder c) { c.initGraphCreate().setGraph(300); }).status, CUDA_SUCCESS);
  ASSERT_EQ(addNode(t, 300, memsetOf(counter, 1)).value, 1u);
  ASSERT_EQ(addNode(t, 300, [](wire::AddNode::Builder n) { n.setEmpty(); }).value, 2u);
  auto getParams = [&](uint32_t node) {
    return t.call([&](wire::Call::Builder c) {
      auto ref = c.initGraphMemsetNodeGetParams();
      ref.setGraph(300);
      ref.setNode(node);
    });
  };
  Answer params = getParams(1);
  ASSERT_EQ(params.status, CUDA_SUCCESS);
  EXPECT_EQ(params.memsetDst, counter);
  EXPECT_EQ(params.memsetValue, 7u);
  EXPECT_EQ(getParams(2).status, CUDA_ERROR_INVALID_VALUE);  // an empty node

  // The executable graph's node now sets the next word to 9; the graph's own node is unchanged.
  ASSERT_EQ(t.instantiate(300, 301).status, CUDA_SUCCESS);
  ASSERT_EQ(setMemsetNode(t, 301, counter + 4, 9).status, CUDA_SUCCESS);
  t.launchGraph(301, kStream);
  EXPECT_EQ(t.read(counter), 0u);
  EXPECT_EQ(t.read(counter + 4), 9u);
  EXPECT_EQ(getParams(1).memsetDst, counter);

  // Disabled, the node does nothing at the next launch.
  Answer enabled = t.call([](wire::Call::Builder c) { setTarget(c.initGraphNodeGetEnabled(), 301, 300, 1); });
  ASSERT_EQ(enabled.status, CUDA_SUCCESS);
  EXPECT_EQ(enabled.value, 1u);
  ASSERT_EQ(setEnabled(t, 301, false).status, CUDA_SUCCESS);
  ASSERT_EQ(setMemsetNode(t, 301, counter + 4, 5).status, CUDA_SUCCESS);
  t.launchGraph(301, kStream);
  EXPECT_EQ(t.read(counter + 4), 9u);

  // Another tenant's memory and executable graphs are refused.
  Tenant other(server());
  uint64_t theirs = other.prepare();
  EXPECT_EQ(setMemsetNode(t, 0, theirs, 1).status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(setMemsetNode(t, 301, theirs, 1).status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(setEnabled(other, 301, true).status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(setMemsetNode(other, 301, theirs, 1).status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(other.read(theirs), 0u);
}

TEST(GraphSession, NodesWithoutFunctionsNameOnlyTheTenantsMemoryEventsAndGraphs) {
  Tenant a(server());
  uint64_t mine = a.prepare();
  Tenant b(server());
  uint64_t theirs = b.prepare();
  b.post([](wire::Call::Builder c) { c.initEventCreate().setEvent(kEvent); });
  for (Tenant* t : {&a, &b}) {
    ASSERT_EQ(t->call([](wire::Call::Builder c) { c.initGraphCreate().setGraph(300); }).status, CUDA_SUCCESS);
  }
  ASSERT_EQ(b.call([](wire::Call::Builder c) { c.initGraphCreate().setGraph(400); }).status, CUDA_SUCCESS);

  EXPECT_EQ(addNode(a, 300, memsetOf(theirs, 4)).status, CUDA_ERROR_INVALID_VALUE);   // another tenant's memory
  EXPECT_EQ(addNode(a, 300, memsetOf(0x1000, 4)).status, CUDA_ERROR_INVALID_VALUE);   // nobody's
  EXPECT_EQ(addNode(a, 300, memsetOf(mine, 17)).status, CUDA_ERROR_INVALID_VALUE);    // 68 bytes: past the allocation
  EXPECT_EQ(addNode(a, 300, memsetOf(mine, 4, 3)).status, CUDA_ERROR_INVALID_VALUE);  // no 3-byte memset
  EXPECT_EQ(addNode(a, 300, memsetOf(mine, 4), {9}).status, CUDA_ERROR_INVALID_VALUE);  // no node 9
  EXPECT_EQ(addNode(a, 999, memsetOf(mine, 4)).status, CUDA_ERROR_INVALID_VALUE);       // no graph 999
  // Tenant b's event and graph ids name nothing of tenant a's.
  EXPECT_EQ(addNode(a, 300, [](wire::AddNode::Builder n) { n.setEventRecord(kEvent); }).status,
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(addNode(a, 300, [](wire::AddNode::Builder n) { n.setEventWait(kEvent); }).status,
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(addNode(a, 300, [](wire::AddNode::Builder n) { n.setChildGraph(400); }).status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(addNode(a, 300, [](wire::AddNode::Builder n) { n.setChildGraph(300); }).status,
            CUDA_ERROR_INVALID_VALUE);  // itself
  EXPECT_EQ(a.read(mine), 0u);

  ASSERT_EQ(a.call([](wire::Call::Builder c) { c.initGraphCreate().setGraph(301); }).status, CUDA_SUCCESS);
  EXPECT_EQ(b.call([](wire::Call::Builder c) { c.initGraphGetEdges().setGraph(301); }).status, CUDA_ERROR_INVALID_VALUE);
  Answer foreignNode = b.call([](wire::Call::Builder c) {
    auto n = c.initGraphDestroyNode();
    n.setGraph(301);
    n.setNode(1);
  });
  EXPECT_EQ(foreignNode.status, CUDA_ERROR_INVALID_VALUE);
  Answer noNode = a.call([](wire::Call::Builder c) {
    auto n = c.initGraphDestroyNode();
    n.setGraph(301);
    n.setNode(1);  // an empty graph
  });
  EXPECT_EQ(noNode.status, CUDA_ERROR_INVALID_VALUE);
  auto clone = [](Tenant& t, uint64_t graph, uint64_t copy) {
    return t.call([&](wire::Call::Builder c) {
      auto g = c.initGraphClone();
      g.setGraph(graph);
      g.setClone(copy);
    }).status;
  };
  EXPECT_EQ(clone(b, 301, 302), CUDA_ERROR_INVALID_VALUE);  // not b's graph
  EXPECT_EQ(clone(a, 301, 300), CUDA_ERROR_INVALID_VALUE);  // clone id in use
  EXPECT_EQ(removeEdge(b, 301, 1, 2).status, CUDA_ERROR_INVALID_VALUE);
}

// --- ids ------------------------------------------------------------------------------------------

TEST(GraphSession, IdsAreTheTenantsOwnAndValidated) {
  Tenant a(server());
  a.prepare();
  ASSERT_EQ(a.call([](wire::Call::Builder c) { c.initGraphCreate().setGraph(500); }).status, CUDA_SUCCESS);
  ASSERT_EQ(a.instantiate(500, 501).status, CUDA_SUCCESS);
  EXPECT_EQ(a.call([](wire::Call::Builder c) { c.initGraphCreate().setGraph(500); }).status,
            CUDA_ERROR_INVALID_VALUE);  // in use
  EXPECT_EQ(a.call([](wire::Call::Builder c) { c.initGraphCreate().setGraph(0); }).status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(a.instantiate(999, 502).status, CUDA_ERROR_INVALID_VALUE);  // no graph 999
  EXPECT_EQ(a.instantiate(500, 501).status, CUDA_ERROR_INVALID_VALUE);  // exec id in use

  Tenant b(server());
  b.prepare();
  // Tenant a's ids name nothing of tenant b's.
  EXPECT_EQ(b.instantiate(500, 601).status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(b.call([](wire::Call::Builder c) { c.initGraphDestroy().setGraph(500); }).status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(b.call([](wire::Call::Builder c) { c.initGraphExecDestroy().setExec(501); }).status,
            CUDA_ERROR_INVALID_VALUE);
  Answer launch = b.call([](wire::Call::Builder c) {
    auto l = c.initGraphLaunch();
    l.setExec(501);
    l.setStream(kStream);
  });
  EXPECT_EQ(launch.status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(b.call([](wire::Call::Builder c) { c.initGraphGetNodes().setGraph(500); }).status, CUDA_ERROR_INVALID_VALUE);
  // Its own ids may be the same numbers.
  EXPECT_EQ(b.call([](wire::Call::Builder c) { c.initGraphCreate().setGraph(500); }).status, CUDA_SUCCESS);

  // Kernel nodes name the tenant's own functions only.
  Answer foreign = b.call([](wire::Call::Builder c) {
    auto k = c.initGraphAddKernelNode();
    k.setGraph(500);
    k.initParams().setFunction(0x49999);
  });
  EXPECT_EQ(foreign.status, CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(a.call([](wire::Call::Builder c) { c.initGraphDestroy().setGraph(500); }).status, CUDA_SUCCESS);
  EXPECT_EQ(a.call([](wire::Call::Builder c) { c.initGraphExecDestroy().setExec(501); }).status, CUDA_SUCCESS);
}

TEST(GraphSession, CaptureLifecycleErrorsAreTheNativeOnes) {
  Tenant t(server());
  t.prepare();
  EXPECT_EQ(t.beginCapture(kLegacy).status, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(t.beginCapture(0x12345).status, CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(t.beginCapture(kStream, 7).status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(t.endCapture(kStream, 100).status, CUDA_ERROR_ILLEGAL_STATE);  // not capturing
  ASSERT_EQ(t.beginCapture(kStream).status, CUDA_SUCCESS);
  EXPECT_EQ(t.beginCapture(kStream).status, CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(t.endCapture(kStream, 0).status, CUDA_ERROR_INVALID_VALUE);  // no graph id: the capture ends anyway
  EXPECT_EQ(t.endCapture(kStream, 100).status, CUDA_ERROR_ILLEGAL_STATE);
}

// --- calls that must not run on a capturing stream ---------------------------------------------

TEST(GraphSession, SyncOfACapturingStreamIsRefusedAndInvalidates) {
  Tenant t(server());
  t.prepare();
  ASSERT_EQ(t.beginCapture(kStream).status, CUDA_SUCCESS);
  EXPECT_EQ(t.synchronize(kStream).status, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(t.call([](wire::Call::Builder c) { c.initStreamQuery().setStream(kStream); }).status,
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(t.endCapture(kStream, 100).status, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(t.instantiate(100, 200).status, CUDA_ERROR_INVALID_VALUE);  // no graph came of it
}

TEST(GraphSession, CopiesThroughStagingAndHostCallbacksAreNotCaptured) {
  Tenant t(server());
  uint64_t counter = t.prepare();
  ASSERT_EQ(t.beginCapture(kStream).status, CUDA_SUCCESS);
  std::string bytes(16, 'x');
  Answer in = t.call([&](wire::Call::Builder c) {
    auto m = c.initMemcpy();
    m.setKind(wire::CopyKind::HOST_TO_DEVICE);
    m.setStream(kStream);
    m.setDst(counter);
    m.setWidth(bytes.size());
  }, bytes);
  EXPECT_EQ(in.status, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);  // and its bulk consumed: still framed
  Answer out = t.call([&](wire::Call::Builder c) {
    auto m = c.initMemcpy();
    m.setKind(wire::CopyKind::DEVICE_TO_HOST);
    m.setStream(kStream);
    m.setSrc(counter);
    m.setWidth(4);
    m.setToken(5);
  });
  EXPECT_EQ(out.status, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  Answer callback = t.call([](wire::Call::Builder c) {
    auto f = c.initHostFunc();
    f.setStream(kStream);
    f.setCallback(1);
  });
  EXPECT_EQ(callback.status, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(t.endCapture(kStream, 100).status, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(t.read(counter), 0u);  // the refused copy never ran
}

TEST(GraphSession, LegacyStreamWhileABlockingStreamCapturesIsImplicit) {
  Tenant t(server());
  uint64_t counter = t.prepare();
  t.createStream(kBlockingStream, false);
  ASSERT_EQ(t.beginCapture(kBlockingStream).status, CUDA_SUCCESS);
  Answer set = t.call([&](wire::Call::Builder c) {
    auto m = c.initMemset();
    m.setStream(kLegacy);
    m.setDst(counter);
    m.setWidth(4);
    m.setValue(1);
  });
  EXPECT_EQ(set.status, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(t.endCapture(kBlockingStream, 100).status, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(t.read(counter), 0u);  // the memset did not run
}

TEST(GraphSession, EventsForkAndJoinACaptureAndCannotBeWaitedFor) {
  Tenant t(server());
  uint64_t counter = t.prepare();
  t.createStream(kOtherStream, true);
  for (uint64_t e : {kEvent, kOtherEvent}) t.post([&](wire::Call::Builder c) { c.initEventCreate().setEvent(e); });
  auto record = [&](uint64_t event, uint64_t stream) {
    t.post([&](wire::Call::Builder c) {
      auto r = c.initEventRecord();
      r.setEvent(event);
      r.setStream(stream);
    });
  };
  auto wait = [&](uint64_t stream, uint64_t event) {
    t.post([&](wire::Call::Builder c) {
      auto w = c.initStreamWaitEvent();
      w.setStream(stream);
      w.setEvent(event);
    });
  };
  ASSERT_EQ(t.beginCapture(kStream).status, CUDA_SUCCESS);
  record(kEvent, kStream);
  Answer sync = t.call([](wire::Call::Builder c) { c.initEventSynchronize().setEvent(kEvent); });
  EXPECT_EQ(sync.status, CUDA_ERROR_CAPTURED_EVENT);
  wait(kOtherStream, kEvent);  // fork: the other stream joins the capture
  t.launchAdd(kOtherStream, counter);
  t.launchAdd(kStream, counter);
  record(kOtherEvent, kOtherStream);
  wait(kStream, kOtherEvent);  // join
  EXPECT_EQ(t.read(counter), 0u);
  Answer ended = t.endCapture(kStream, 100);
  ASSERT_EQ(ended.status, CUDA_SUCCESS);
  EXPECT_EQ(ended.deferred, CUDA_SUCCESS);
  ASSERT_EQ(t.instantiate(100, 200).status, CUDA_SUCCESS);
  t.launchGraph(200, kStream);
  EXPECT_EQ(t.read(counter), 2u);
  EXPECT_EQ(t.synchronize(kOtherStream).status, CUDA_SUCCESS);  // out of the capture again
}

// --- the end of a tenant --------------------------------------------------------------------------

TEST(GraphSession, ATenantLeavingMidCaptureLeavesNoGraphBehind) {
  size_t before = liveGraphs();
  {
    Tenant t(server());
    uint64_t counter = t.prepare();
    ASSERT_EQ(t.beginCapture(kStream).status, CUDA_SUCCESS);
    t.launchAdd(kStream, counter);
    ASSERT_EQ(t.endCapture(kStream, 100).status, CUDA_SUCCESS);
    ASSERT_EQ(t.instantiate(100, 200).status, CUDA_SUCCESS);
    t.launchGraph(200, kStream);
    ASSERT_EQ(t.call([](wire::Call::Builder c) { c.initGraphCreate().setGraph(300); }).status, CUDA_SUCCESS);
    ASSERT_EQ(t.beginCapture(kStream).status, CUDA_SUCCESS);  // still open when it leaves
    t.launchAdd(kStream, counter);
    EXPECT_EQ(liveGraphs(), before + 4);
    t.leave();
  }
  EXPECT_EQ(liveGraphs(), before);
}

// --- the scheduler ----------------------------------------------------------------------------------

// A stream that waited on a word may need this tenant's later calls to go on (the write it waits
// for), and a parked stream can hold a hardware queue HP's work is behind: from then on, the
// tenant's launches must never be held back until HP is idle.
TEST(GraphSession, AStreamWaitMakesTheTenantsLaunchesUnholdable) {
  RecordingPolicy* recording = nullptr;
  Server& s = recordingServer(recording);
  Tenant t(s);
  uint64_t words = t.prepare();
  recording->mustNotHold.clear();
  t.launchAdd(kStream, words + 16);
  t.writeValue32(kStream, words, 5);
  t.launchAdd(kStream, words + 16);  // a write is no wait
  t.memOp(kStream, CU_STREAM_MEM_OP_WAIT_VALUE_32, words, 5, CU_STREAM_WAIT_VALUE_GEQ);  // already true
  t.launchAdd(kStream, words + 16);
  Answer synced = t.synchronize(kStream);
  EXPECT_EQ(synced.status, CUDA_SUCCESS);
  EXPECT_EQ(synced.deferred, CUDA_SUCCESS);
  EXPECT_EQ(recording->mustNotHold, (std::vector<bool>{false, false, true}));
  EXPECT_EQ(t.read(words + 16), 3u);
}

TEST(GraphSession, HighPriorityAndBestEffortTenantsCaptureUnderThePriorityPolicy) {
  Server& s = priorityServer();
  Tenant hp(s, wire::PriorityClass::HIGH_PRIORITY);
  Tenant be(s, wire::PriorityClass::BEST_EFFORT);
  for (Tenant* t : {&hp, &be}) {
    uint64_t counter = t->prepare();
    ASSERT_EQ(t->beginCapture(kStream).status, CUDA_SUCCESS);
    t->launchAdd(kStream, counter);
    t->launchAdd(kStream, counter);
    // Other stream work while capturing: no scheduler mark may be captured with it.
    t->post([&](wire::Call::Builder c) {
      auto m = c.initMemset();
      m.setStream(kStream);
      m.setDst(counter + 8);
      m.setElementSize(4);
      m.setWidth(1);
      m.setValue(7);
    });
    Answer ended = t->endCapture(kStream, 100);
    ASSERT_EQ(ended.status, CUDA_SUCCESS);
    EXPECT_EQ(ended.deferred, CUDA_SUCCESS);
    Answer nodes = t->call([](wire::Call::Builder c) { c.initGraphGetNodes().setGraph(100); });
    EXPECT_EQ(nodes.nodeTypes.size(), 3u);  // two kernels and the memset, nothing of the scheduler's
    ASSERT_EQ(t->instantiate(100, 200).status, CUDA_SUCCESS);
    for (int i = 0; i < 5; ++i) t->launchGraph(200, kStream);
    EXPECT_EQ(t->synchronize(kStream).status, CUDA_SUCCESS);
    EXPECT_EQ(t->read(counter), 10u);
    EXPECT_EQ(t->read(counter + 8), 7u);
  }
}

// --- a tenant's thread ------------------------------------------------------------------------------

// How many of this process's threads run at nice `value` (/proc/self/task/*/stat, field 19).
size_t threadsAtNice(int value) {
  size_t count = 0;
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) throw std::runtime_error("no /proc/self/task");
  while (dirent* entry = ::readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream in(std::string("/proc/self/task/") + entry->d_name + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t afterName = stat.rfind(')');
    if (afterName == std::string::npos) continue;  // the thread ended meanwhile
    std::istringstream fields(stat.substr(afterName + 2));
    std::string field;
    for (int i = 3; i <= 19 && fields >> field; ++i) {
      if (i == 19 && std::stoi(field) == value) ++count;
    }
  }
  ::closedir(tasks);
  return count;
}

TEST(TenantThread, ABestEffortTenantsThreadRunsNicerThanAHighPriorityOnes) {
  Server& s = priorityServer();
  ASSERT_GT(s.services.bestEffortNice, 0u);
  errno = 0;
  int base = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
  ASSERT_EQ(errno, 0);
  if (base + static_cast<int>(s.services.bestEffortNice) > 19) GTEST_SKIP() << "this test already runs at nice " << base;
  const int nicer = base + static_cast<int>(s.services.bestEffortNice);
  size_t before = threadsAtNice(nicer);
  Tenant hp(s, wire::PriorityClass::HIGH_PRIORITY);
  hp.prepare();  // answered from the tenant's thread, after its handshake
  EXPECT_EQ(threadsAtNice(nicer), before);
  Tenant be(s, wire::PriorityClass::BEST_EFFORT);
  be.prepare();
  EXPECT_EQ(threadsAtNice(nicer), before + 1);
  be.leave();
  EXPECT_EQ(threadsAtNice(nicer), before);
}

// --- stream memory operations ----------------------------------------------------------------------

TEST(StreamMemOpsSession, AWriteToTheTenantsOwnMemoryRuns) {
  Tenant t(server());
  uint64_t word = t.prepare();
  t.writeValue32(kStream, word, 0x1234);
  Answer synced = t.synchronize(kStream);
  EXPECT_EQ(synced.status, CUDA_SUCCESS);
  EXPECT_EQ(synced.deferred, CUDA_SUCCESS);
  EXPECT_EQ(t.read(word), 0x1234u);
}

// What tests/gpu/stream_memory_ops.cu does: a consumer stream waits on a word (32 and 64 bits,
// and a batch of both) that a producer stream writes after its kernel. Every operation is
// enqueued: no deferred error reaches the consumer's sync.
TEST(StreamMemOpsSession, AConsumerWaitsOnWordsAProducerWrites) {
  Tenant t(server());
  uint64_t words = t.prepare();  // 64 bytes: the words at 0 and 8, kernel counters past them
  t.createStream(kOtherStream, true);
  t.memOp(kStream, CU_STREAM_MEM_OP_WAIT_VALUE_32, words, 1, CU_STREAM_WAIT_VALUE_GEQ);
  t.launchAdd(kStream, words + 16);
  t.launchAdd(kOtherStream, words + 20);
  t.writeValue32(kOtherStream, words, 1);
  Answer synced = t.synchronize(kStream);
  EXPECT_EQ(synced.status, CUDA_SUCCESS);
  EXPECT_EQ(synced.deferred, CUDA_SUCCESS);

  const uint64_t big = (1ull << 40) + 7;
  t.memOp(kStream, CU_STREAM_MEM_OP_WAIT_VALUE_64, words + 8, big, CU_STREAM_WAIT_VALUE_EQ);
  t.launchAdd(kStream, words + 16);
  t.memOp(kOtherStream, CU_STREAM_MEM_OP_WRITE_VALUE_64, words + 8, big, CU_STREAM_WRITE_VALUE_DEFAULT);
  synced = t.synchronize(kStream);
  EXPECT_EQ(synced.status, CUDA_SUCCESS);
  EXPECT_EQ(synced.deferred, CUDA_SUCCESS);

  auto batch = [&](uint64_t stream, uint32_t op32, uint32_t op64, uint32_t flags32, uint32_t flags64) {
    t.post([&](wire::Call::Builder c) {
      auto m = c.initStreamMemOps();
      m.setStream(stream);
      auto ops = m.initOps(2);
      ops[0].setOperation(op32);
      ops[0].setAddress(words);
      ops[0].setValue(2);
      ops[0].setFlags(flags32);
      ops[1].setOperation(op64);
      ops[1].setAddress(words + 8);
      ops[1].setValue(big + 1);
      ops[1].setFlags(flags64);
    });
  };
  batch(kStream, CU_STREAM_MEM_OP_WAIT_VALUE_32, CU_STREAM_MEM_OP_WAIT_VALUE_64, CU_STREAM_WAIT_VALUE_GEQ,
        CU_STREAM_WAIT_VALUE_EQ);
  t.launchAdd(kStream, words + 16);
  batch(kOtherStream, CU_STREAM_MEM_OP_WRITE_VALUE_32, CU_STREAM_MEM_OP_WRITE_VALUE_64, 0, 0);
  synced = t.synchronize(kStream);
  EXPECT_EQ(synced.status, CUDA_SUCCESS);
  EXPECT_EQ(synced.deferred, CUDA_SUCCESS);
  EXPECT_EQ(t.synchronize(kOtherStream).deferred, CUDA_SUCCESS);
  EXPECT_EQ(t.read(words), 2u);
  EXPECT_EQ(t.read(words + 16), 3u);  // the consumer's three kernels ran
}

TEST(StreamMemOpsSession, AWriteToAnotherTenantsMemoryIsRefused) {
  Tenant owner(server());
  uint64_t theirs = owner.prepare();
  Tenant intruder(server());
  intruder.prepare();
  intruder.writeValue32(kLegacy, theirs, 0xdead);
  Answer synced = intruder.synchronize(kLegacy);
  EXPECT_EQ(synced.status, CUDA_SUCCESS);
  EXPECT_EQ(synced.deferred, CUDA_ERROR_INVALID_VALUE);  // the one-way call's refusal, at the next sync
  EXPECT_EQ(owner.read(theirs), 0u);                     // never executed
  intruder.writeValue32(kLegacy, theirs + 2, 1);         // misaligned, even if it were the tenant's
  EXPECT_EQ(intruder.synchronize(kLegacy).deferred, CUDA_ERROR_INVALID_VALUE);
}

// --- the stream-ordered allocator ------------------------------------------------------------------

// The fake driver (FakePool) gives back only frees it has seen complete in a synchronize of the
// freeing stream, as the H200's does; the tenant's syncs are answered from completion events, so
// the trim itself has to make the driver see them, without touching a capturing stream.
TEST(MemPoolSession, TrimGivesBackWhatTheTenantFreedAndWaitedFor) {
  Tenant t(server());
  t.prepare();
  constexpr uint64_t kDefaultPool = 1;  // device 0's
  constexpr uint64_t kBytes = 1u << 20;
  auto attribute = [&](uint32_t which) {
    Answer a = t.call([&](wire::Call::Builder c) {
      auto g = c.initMemPool().initGetAttribute();
      g.setPool(kDefaultPool);
      g.setAttribute(which);
    });
    EXPECT_EQ(a.status, CUDA_SUCCESS);
    return a.value;
  };
  Answer allocated = t.call([&](wire::Call::Builder c) {
    auto a = c.initMemPool().initAllocAsync();
    a.setPool(kDefaultPool);
    a.setStream(kStream);
    a.setSize(kBytes);
  });
  ASSERT_EQ(allocated.status, CUDA_SUCCESS);
  EXPECT_EQ(attribute(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), kBytes);
  t.post([&](wire::Call::Builder c) {
    auto f = c.initMemPool().initFreeAsync();
    f.setPtr(allocated.value);
    f.setStream(kStream);
  });
  Answer synced = t.synchronize(kStream);
  EXPECT_EQ(synced.status, CUDA_SUCCESS);
  EXPECT_EQ(synced.deferred, CUDA_SUCCESS);
  EXPECT_EQ(attribute(CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0u);
  EXPECT_EQ(attribute(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), kBytes);  // kept until trimmed

  t.createStream(kOtherStream, true);
  ASSERT_EQ(t.beginCapture(kOtherStream).status, CUDA_SUCCESS);
  Answer trimmed = t.call([&](wire::Call::Builder c) {
    auto trim = c.initMemPool().initTrimTo();
    trim.setPool(kDefaultPool);
    trim.setMinBytesToKeep(0);
  });
  EXPECT_EQ(trimmed.status, CUDA_SUCCESS);
  EXPECT_EQ(attribute(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  EXPECT_EQ(t.endCapture(kOtherStream, 300).status, CUDA_SUCCESS);  // the capture was not touched
}

// --- hardware queues --------------------------------------------------------------------------------

// tally_gpu_streams counts every driver stream a tenant holds, and none after it left: past the
// GPU's hardware queues, streams share them (docs/scheduler.md, "Hardware queues").
TEST(StreamCount, ATenantsDriverStreamsAreCountedUntilItLeaves) {
  server::gpu::Gpu* g = openGpus()[0];
  const unsigned before = g->liveStreams();
  Tenant t(server());
  t.prepare();  // its legacy stream (the memset) and kStream
  t.createStream(kOtherStream, true);
  EXPECT_EQ(t.synchronize(kOtherStream).status, CUDA_SUCCESS);  // after the one-way creates
  EXPECT_GE(g->liveStreams(), before + 3) << "the legacy stream and two created ones";
  t.leave();
  EXPECT_EQ(g->liveStreams(), before) << "a tenant that left still counts streams";
}

// Past the GPU's hardware queues tallyd says so once, not at every tenant that comes and goes.
TEST(StreamCount, StreamsPastTheHardwareQueuesAreLoggedOnce) {
  server::gpu::Gpu* g = openGpus()[0];
  Server& shared = server();  // made before the capture: making it sets up tallyd's logging
  std::ostringstream log;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("stream_count_test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  auto count = [&log] {
    std::string text = log.str();
    size_t found = 0;
    for (size_t at = text.find("hardware queues"); at != std::string::npos; at = text.find("hardware queues", at + 1)) {
      ++found;
    }
    return found;
  };
  for (int round = 0; round < 2; ++round) {
    Tenant t(shared);
    t.prepare();
    for (uint64_t i = 0; g->liveStreams() <= server::gpu::Gpu::hardwareQueues() + 1; ++i) {
      t.createStream(kBlockingStream + 100 + i, true);
      ASSERT_EQ(t.synchronize(kStream).status, CUDA_SUCCESS);  // the create has been handled
      ASSERT_LT(i, 64u) << "streams are not counted";
    }
    t.leave();
    EXPECT_EQ(count(), 1u) << "round " << round << ": " << log.str();
  }
  spdlog::set_default_logger(previous);
}

}  // namespace
}  // namespace tally
