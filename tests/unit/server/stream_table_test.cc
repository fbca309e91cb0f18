// StreamTable admission: handles, max_streams (legacy default streams do not count) and
// max_events (issue 13, finding 15); and what a chained launch may follow. No GPU: states are
// inserted as the driver edge would.
#include "server/session/stream_table.h"

#include <gtest/gtest.h>

#include <memory>

namespace tally::server::session {
namespace {

std::unique_ptr<StreamState> streamState(uint64_t id, bool legacyDefault = false) {
  auto s = std::make_unique<StreamState>();
  s->id = id;
  s->legacyDefault = legacyDefault;
  return s;
}

struct StreamTableTest : testing::Test {
  std::atomic<uint32_t> published{0};
  StreamTable table{{}, StreamLimits{2, 3}, "tenant 1 (test)", published};
};

TEST_F(StreamTableTest, LegacyIdsAndHandlesInUseAreRefused) {
  EXPECT_EQ(table.admitStream(1), CUDA_ERROR_INVALID_HANDLE);  // a legacy default stream's id
  EXPECT_EQ(table.admitStream(kFirstUserStream - 1), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(table.admitStream(kFirstUserStream), CUDA_SUCCESS);
  table.insertStream(streamState(kFirstUserStream));
  EXPECT_EQ(table.admitStream(kFirstUserStream), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(StreamTableTest, MaxStreamsCountsOnlyStreamsTheTenantCreated) {
  table.insertStream(streamState(1, true));
  table.insertStream(streamState(kFirstUserStream));
  EXPECT_EQ(published.load(), 1u);
  EXPECT_EQ(table.admitStream(kFirstUserStream + 1), CUDA_SUCCESS);
  table.insertStream(streamState(kFirstUserStream + 1));
  EXPECT_EQ(table.userStreamCount(), 2u);
  EXPECT_EQ(table.streamCount(), 3u);
  EXPECT_EQ(published.load(), 2u);
  EXPECT_EQ(table.admitStream(kFirstUserStream + 2), CUDA_ERROR_OUT_OF_MEMORY);
}

TEST_F(StreamTableTest, MaxEventsRefusesOneMoreWithOutOfMemory) {
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_EQ(table.admitEvent(id), CUDA_SUCCESS) << id;
    table.insertEvent(id, EventState{});
  }
  EXPECT_EQ(table.eventCount(), 3u);
  EXPECT_EQ(table.admitEvent(2), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(table.admitEvent(4), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(table.event(3), nullptr);
  EXPECT_EQ(table.event(4), nullptr);
}

TEST(StreamTable, UnlimitedWhenTheLimitsAreZero) {
  std::atomic<uint32_t> published{0};
  StreamTable table({}, StreamLimits{0, 0}, "tenant 1 (test)", published);
  for (uint64_t i = 0; i < 100; ++i) {
    ASSERT_EQ(table.admitStream(kFirstUserStream + i), CUDA_SUCCESS);
    table.insertStream(streamState(kFirstUserStream + i));
    ASSERT_EQ(table.admitEvent(i), CUDA_SUCCESS);
    table.insertEvent(i, EventState{});
  }
}

TEST(CountLimit, AllowsUpToTheLimitAndZeroMeansUnlimited) {
  CountLimit limit("things", 2, "tenant 1 (test)");
  EXPECT_TRUE(limit.allowsOneMore(0));
  EXPECT_TRUE(limit.allowsOneMore(1));
  EXPECT_FALSE(limit.allowsOneMore(2));
  EXPECT_FALSE(limit.allowsOneMore(3));
  CountLimit unlimited("things", 0, "tenant 1 (test)");
  EXPECT_TRUE(unlimited.allowsOneMore(1'000'000));
}

TEST(TenantLimits, DefaultsCapEventsModulesAndHostMappings) {
  TenantLimits limits;
  EXPECT_EQ(limits.maxEvents, 65536u);
  EXPECT_EQ(limits.maxModules, 4096u);
  EXPECT_EQ(limits.maxHostMappings, 1024u);
}

// A chained HP launch may overlap only a kernel of its own stream (scheduler::KernelLaunch::
// followsKernel): what api/dispatch.cc's streamForWork and api/launch_api.cc count.
TEST(FollowsKernel, OnlyWhenTheLastWorkOnTheSameDriverStreamWasAKernel) {
  StreamState s;
  int driverStreams[2];
  s.stream = reinterpret_cast<CUstream>(&driverStreams[0]);
  ++s.workQueued;  // a launch's streamForWork
  EXPECT_FALSE(followsKernel(s)) << "nothing before the first launch";
  noteKernel(s);
  ++s.workQueued;  // the next launch
  EXPECT_TRUE(followsKernel(s));
  noteKernel(s);
  ++s.workQueued;  // a copy
  ++s.workQueued;  // then a launch
  EXPECT_FALSE(followsKernel(s)) << "a copy came between";
  noteKernel(s);
  ++s.workQueued;  // a launch, after the stream moved to another partition's driver stream
  s.stream = reinterpret_cast<CUstream>(&driverStreams[1]);
  EXPECT_FALSE(followsKernel(s)) << "the last kernel is on the old driver stream";
}

}  // namespace
}  // namespace tally::server::session
