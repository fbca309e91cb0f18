// GraphTable bookkeeping: graph and executable-graph ids (the client's, 0 refused, one in use
// refused), the per-tenant cap, the capture records and the count StreamTable keeps of them.
// No GPU: states are inserted as the driver edge would (the handlers on the fake GPU are in
// tests/fuzz/graph_session_test.cc).
#include "server/session/graph_table.h"

#include "server/session/stream_table.h"

#include <gtest/gtest.h>

namespace tally::server::session {
namespace {

struct GraphTableTest : testing::Test {
  std::atomic<uint32_t> published{0};
  StreamTable streams{{}, StreamLimits{}, "tenant 1 (test)", published};
  GraphTable table{streams, 2, "tenant 1 (test)"};
};

TEST_F(GraphTableTest, GraphIdsAreTheClientsAndValidated) {
  EXPECT_EQ(table.admitGraph(0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(table.admitGraph(10), CUDA_SUCCESS);
  table.insertGraph(10, GraphState{});
  EXPECT_EQ(table.admitGraph(10), CUDA_ERROR_INVALID_VALUE);  // in use
  EXPECT_NE(table.graph(10), nullptr);
  EXPECT_EQ(table.graph(11), nullptr);
  EXPECT_TRUE(table.takeGraph(10).has_value());
  EXPECT_FALSE(table.takeGraph(10).has_value());  // destroyed twice
  EXPECT_EQ(table.graph(10), nullptr);
}

TEST_F(GraphTableTest, PastTheCapTheDriversOutOfMemoryAnswer) {
  table.insertGraph(1, GraphState{});
  table.insertGraph(2, GraphState{});
  EXPECT_EQ(table.admitGraph(3), CUDA_ERROR_OUT_OF_MEMORY);
  table.insertExec(1, GraphExecState{});
  table.insertExec(2, GraphExecState{});
  EXPECT_EQ(table.admitExec(3), CUDA_ERROR_OUT_OF_MEMORY);  // counted apart from graphs
  ASSERT_TRUE(table.takeExec(1).has_value());
  EXPECT_EQ(table.admitExec(3), CUDA_SUCCESS);
  EXPECT_EQ(table.admitExec(0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(table.admitExec(2), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(GraphTableTest, ExecsRememberTheirGraph) {
  table.insertExec(5, GraphExecState{nullptr, nullptr, 10, {}});
  ASSERT_NE(table.exec(5), nullptr);
  EXPECT_EQ(table.exec(5)->graph, 10u);
  EXPECT_EQ(table.exec(6), nullptr);
}

// A graph whose executable graphs set host node words through its nodes stays in use while one
// of them lives.
TEST_F(GraphTableTest, HostNodesKeepTheirGraphInUseWhileAnExecLives) {
  table.insertExec(5, GraphExecState{nullptr, nullptr, 10, {}});
  EXPECT_FALSE(table.hostNodesInUse(10)) << "an exec without host nodes needs nothing of its graph";
  GraphExecState withHost{nullptr, nullptr, 10, {}};
  withHost.hostNodes.emplace(3, nullptr);
  table.insertExec(6, withHost);
  EXPECT_TRUE(table.hostNodesInUse(10));
  EXPECT_FALSE(table.hostNodesInUse(11));
  EXPECT_TRUE(table.takeExec(6).has_value());
  EXPECT_FALSE(table.hostNodesInUse(10));
}

TEST_F(GraphTableTest, CapturesAreCountedWhereStreamsAskForThem) {
  EXPECT_EQ(streams.activeCaptures(), 0u);
  table.addCapture(kFirstUserStream, CaptureState{nullptr, nullptr, 77, false});
  table.addCapture(kFirstUserStream + 1, CaptureState{nullptr, nullptr, 78, false});
  EXPECT_EQ(streams.activeCaptures(), 2u);
  EXPECT_EQ(table.captureCount(), 2u);
  EXPECT_TRUE(table.invalidateCapture(78));
  EXPECT_FALSE(table.invalidateCapture(79));  // not this tenant's
  ASSERT_NE(table.capture(kFirstUserStream + 1), nullptr);
  EXPECT_TRUE(table.capture(kFirstUserStream + 1)->invalidated);
  EXPECT_FALSE(table.capture(kFirstUserStream)->invalidated);
  std::optional<CaptureState> ended = table.takeCapture(kFirstUserStream + 1);
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->captureId, 78u);
  EXPECT_EQ(streams.activeCaptures(), 1u);
  EXPECT_FALSE(table.takeCapture(kFirstUserStream + 1).has_value());
  EXPECT_EQ(streams.activeCaptures(), 1u);
  EXPECT_TRUE(table.takeCapture(kFirstUserStream).has_value());
  EXPECT_EQ(streams.activeCaptures(), 0u);
}

TEST_F(GraphTableTest, WithoutCapturesNoStreamIsAskedAndNothingIsToEnd) {
  StreamState s;
  s.stream = reinterpret_cast<CUstream>(uintptr_t{0x1234});  // never handed to the driver
  EXPECT_FALSE(streams.capturing(s));
  EXPECT_TRUE(streams.capturingBlockingStreams(nullptr).empty());
  table.endCaptures();
  table.destroyAll();
  EXPECT_EQ(table.graphCount(), 0u);
}

}  // namespace
}  // namespace tally::server::session
