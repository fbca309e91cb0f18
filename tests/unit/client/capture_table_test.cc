// CaptureTable: which streams capture, forks and joins through events, ending a capture, and
// the capture-mode rules for "potentially unsafe" calls among the application's threads. No
// connection: the table is the client's own bookkeeping (client/runtime/capture_table.h).
#include "client/runtime/capture_table.h"

#include <gtest/gtest.h>

#include <thread>

namespace tally::client {
namespace {

constexpr uint64_t kStream = 0x10001, kOther = 0x10002, kThird = 0x10003;
constexpr uint64_t kEvent = 0x20001;

std::thread::id self() { return std::this_thread::get_id(); }

std::thread::id anotherThread() {
  std::thread::id id;
  std::thread([&] { id = std::this_thread::get_id(); }).join();
  return id;
}

TEST(CaptureTable, AStreamCapturesFromBeginToEnd) {
  CaptureTable table;
  EXPECT_FALSE(table.anyActive());
  EXPECT_EQ(table.status(kStream).status, CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_EQ(table.admitBegin(kStream), CUDA_SUCCESS);
  table.begin(kStream, 0, 42, CU_STREAM_CAPTURE_MODE_GLOBAL, self());
  EXPECT_TRUE(table.anyActive());
  CaptureTable::Status s = table.status(kStream);
  EXPECT_EQ(s.status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(s.id, 42u);
  EXPECT_EQ(table.status(kOther).status, CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(table.admitBegin(kStream), CUDA_ERROR_ILLEGAL_STATE);  // already capturing
  CaptureTable::Ended ended;
  ASSERT_EQ(table.end(kStream, self(), ended), CUDA_SUCCESS);
  EXPECT_EQ(ended.id, 42u);
  EXPECT_FALSE(ended.invalidated);
  EXPECT_FALSE(table.anyActive());
  EXPECT_EQ(table.status(kStream).status, CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(table.end(kStream, self(), ended), CUDA_ERROR_ILLEGAL_STATE);  // not capturing
}

TEST(CaptureTable, AWaitOnACapturedEventJoinsTheCaptureUntilItEnds) {
  CaptureTable table;
  table.begin(kStream, 0, 7, CU_STREAM_CAPTURE_MODE_GLOBAL, self());
  table.eventRecorded(kEvent, kStream);
  table.eventWaited(kOther, kEvent);
  EXPECT_EQ(table.status(kOther).status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(table.status(kOther).id, 7u);
  EXPECT_EQ(table.admitBegin(kOther), CUDA_ERROR_ILLEGAL_STATE);
  CaptureTable::Ended ended;
  EXPECT_EQ(table.end(kOther, self(), ended), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);  // not its capture
  ASSERT_EQ(table.end(kStream, self(), ended), CUDA_SUCCESS);
  EXPECT_EQ(table.status(kOther).status, CU_STREAM_CAPTURE_STATUS_NONE);
  // The event belonged to a capture that is over: waiting on it joins nothing.
  table.begin(kThird, 0, 8, CU_STREAM_CAPTURE_MODE_GLOBAL, self());
  table.eventWaited(kOther, kEvent);
  EXPECT_EQ(table.status(kOther).status, CU_STREAM_CAPTURE_STATUS_NONE);
}

TEST(CaptureTable, AnEventRecordedOutsideACaptureJoinsNothing) {
  CaptureTable table;
  table.begin(kStream, 0, 7, CU_STREAM_CAPTURE_MODE_GLOBAL, self());
  table.eventRecorded(kEvent, kStream);
  table.eventRecorded(kEvent, kThird);  // recorded again, outside
  table.eventWaited(kOther, kEvent);
  EXPECT_EQ(table.status(kOther).status, CU_STREAM_CAPTURE_STATUS_NONE);
  table.eventRecorded(kEvent, kStream);
  table.forgetEvent(kEvent);  // destroyed
  table.eventWaited(kOther, kEvent);
  EXPECT_EQ(table.status(kOther).status, CU_STREAM_CAPTURE_STATUS_NONE);
}

TEST(CaptureTable, OnlyTheBeginningThreadEndsANonRelaxedCapture) {
  CaptureTable table;
  table.begin(kStream, 0, 1, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, self());
  table.begin(kOther, 0, 2, CU_STREAM_CAPTURE_MODE_RELAXED, self());
  CaptureTable::Ended ended;
  EXPECT_EQ(table.end(kStream, anotherThread(), ended), CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  EXPECT_EQ(table.status(kStream).status, CU_STREAM_CAPTURE_STATUS_ACTIVE);  // unchanged
  EXPECT_EQ(table.end(kOther, anotherThread(), ended), CUDA_SUCCESS);       // relaxed: any thread
  EXPECT_EQ(table.end(kStream, self(), ended), CUDA_SUCCESS);
}

TEST(CaptureTable, UnsafeCallsFollowTheModes) {
  CaptureTable table;
  // No capture: nothing is refused.
  EXPECT_EQ(table.checkUnsafeCall(self(), CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);

  // Its own global or thread-local capture binds the thread, unless the thread is relaxed.
  table.begin(kStream, 0, 1, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, self());
  EXPECT_EQ(table.checkUnsafeCall(self(), CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(table.checkUnsafeCall(anotherThread(), CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);  // thread-local
  EXPECT_EQ(table.status(kStream).status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(table.checkUnsafeCall(self(), CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(table.status(kStream).status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CaptureTable::Ended ended;
  ASSERT_EQ(table.end(kStream, self(), ended), CUDA_SUCCESS);
  EXPECT_TRUE(ended.invalidated);

  // Another thread's global capture binds a global-mode thread, not a thread-local one.
  std::thread::id other = anotherThread();
  table.begin(kOther, 0, 2, CU_STREAM_CAPTURE_MODE_GLOBAL, other);
  EXPECT_EQ(table.checkUnsafeCall(self(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  EXPECT_EQ(table.checkUnsafeCall(self(), CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  ASSERT_EQ(table.end(kOther, other, ended), CUDA_SUCCESS);
  EXPECT_TRUE(ended.invalidated);

  // A relaxed capture binds nobody.
  table.begin(kThird, 0, 3, CU_STREAM_CAPTURE_MODE_RELAXED, self());
  EXPECT_EQ(table.checkUnsafeCall(self(), CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(table.end(kThird, self(), ended), CUDA_SUCCESS);
  EXPECT_FALSE(ended.invalidated);
}

TEST(CaptureTable, ADeviceSyncIsRefusedInEveryModeOnTheCapturingDevice) {
  CaptureTable table;
  table.begin(kStream, 1, 1, CU_STREAM_CAPTURE_MODE_RELAXED, self());
  EXPECT_EQ(table.checkDeviceSync(0), CUDA_SUCCESS);  // another device
  EXPECT_EQ(table.checkDeviceSync(1), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(table.status(kStream).status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
}

TEST(CaptureTable, InvalidationReachesTheWholeCaptureFromAnyOfItsStreams) {
  CaptureTable table;
  table.begin(kStream, 0, 1, CU_STREAM_CAPTURE_MODE_GLOBAL, self());
  table.eventRecorded(kEvent, kStream);
  table.eventWaited(kOther, kEvent);
  EXPECT_FALSE(table.invalidate(kThird));  // not capturing
  EXPECT_TRUE(table.invalidate(kOther));
  EXPECT_EQ(table.status(kStream).status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
}

TEST(CaptureTable, ADestroyedStreamLeavesItsCapture) {
  CaptureTable table;
  table.begin(kStream, 0, 1, CU_STREAM_CAPTURE_MODE_GLOBAL, self(), true);
  EXPECT_TRUE(table.blockingCaptureOn(0));
  EXPECT_FALSE(table.blockingCaptureOn(1));
  table.eventRecorded(kEvent, kStream);
  table.eventWaited(kOther, kEvent);
  table.forgetStream(kOther);
  EXPECT_EQ(table.status(kOther).status, CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(table.status(kStream).status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  table.forgetStream(kStream);  // the origin: its capture ends
  EXPECT_FALSE(table.anyActive());
  EXPECT_FALSE(table.blockingCaptureOn(0));
}

}  // namespace
}  // namespace tally::client
